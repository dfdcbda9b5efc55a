//! The GPU memory budget an engine takes when its caller sets none.
//!
//! wgpu does not say how much memory an adapter has. Vulkan drivers that offer
//! `VK_EXT_memory_budget` (NVIDIA's, and Mesa's for AMD and Intel GPUs) report, per memory
//! heap, how much this process may allocate with what other processes hold counted: a
//! discrete GPU on Vulkan takes a share of its largest device-local heap's budget. Instances are made with
//! a resource-creation threshold (`context::discover`), so that a buffer beyond that budget is
//! refused with an out-of-memory error, which the engine handles, rather than paged. Other
//! discrete GPUs get a budget any recent one holds; integrated, virtual and software adapters
//! share the host's memory and get less.

/// Budget of adapters that share the host's memory: enough for the tiles of large graphs,
/// little against the memory of any machine that runs them.
const SHARED_MEMORY_BUDGET: u64 = 1 << 30;
/// Budget of a discrete GPU whose driver reports no memory budget: discrete GPUs of the last
/// several years have 6 GiB or more.
const DISCRETE_BUDGET: u64 = 4 << 30;
/// Share of the driver's memory budget that the engine takes: the rest is for wgpu's own
/// buffers, staging memory that lives on the device, and growth elsewhere during a run.
const REPORTED_SHARE: (u64, u64) = (7, 8);

/// Percent of the driver's memory budget at which buffer creation is refused
/// (`wgpu::MemoryBudgetThresholds::for_resource_creation`).
pub(super) const REFUSE_AT_PERCENT: u8 = 95;

/// How an engine's memory budget was set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BudgetOrigin {
    /// Given by the caller (`Options::memory_budget`, `--gpu-memory`).
    Set,
    /// A share of the memory budget the driver reported, split among the engines the process
    /// opens on the adapter.
    Reported {
        /// Bytes the driver said this process may allocate on the device.
        reported: u64,
        /// Engines sharing the adapter.
        engines: usize,
    },
    /// The fixed budget of its kind of adapter.
    Fixed,
}

/// The memory budget of an engine on `adapter`, one of `engines` the process opens on it.
/// The fixed budgets are not split: they are far below what any adapter of their kind holds.
pub(super) fn default_budget(adapter: &wgpu::Adapter, engines: usize) -> (u64, BudgetOrigin) {
    if adapter.get_info().device_type != wgpu::DeviceType::DiscreteGpu {
        return (SHARED_MEMORY_BUDGET, BudgetOrigin::Fixed);
    }
    match reported_budget(adapter) {
        Some(reported) if reported > 0 => {
            let engines = engines.max(1);
            let share = reported / REPORTED_SHARE.1 * REPORTED_SHARE.0 / engines as u64;
            (share, BudgetOrigin::Reported { reported, engines })
        }
        _ => (DISCRETE_BUDGET, BudgetOrigin::Fixed),
    }
}

/// What the Vulkan driver says this process may allocate in the adapter's largest
/// device-local heap; `None` on other APIs and where the driver does not say.
#[cfg(any(target_os = "linux", target_os = "windows"))]
fn reported_budget(adapter: &wgpu::Adapter) -> Option<u64> {
    use ash::vk;
    // SAFETY: the adapter's Vulkan handles are only read from, never destroyed, and the guard
    // is dropped before the function returns.
    let hal = unsafe { adapter.as_hal::<wgpu::hal::api::Vulkan>() }?;
    let capabilities = hal.physical_device_capabilities();
    let instance = hal.shared_instance();
    // vkGetPhysicalDeviceMemoryProperties2 is Vulkan 1.1; the budget needs the extension.
    if instance.instance_api_version() < vk::API_VERSION_1_1
        || capabilities.properties().api_version < vk::API_VERSION_1_1
        || !capabilities.supports_extension(ash::ext::memory_budget::NAME)
    {
        return None;
    }
    let mut budget = vk::PhysicalDeviceMemoryBudgetPropertiesEXT::default();
    let mut properties = vk::PhysicalDeviceMemoryProperties2::default().push_next(&mut budget);
    // SAFETY: a valid physical device of this instance, and a properties chain that the
    // version and extension checked above allow.
    unsafe {
        instance.raw_instance().get_physical_device_memory_properties2(hal.raw_physical_device(), &mut properties)
    };
    let heaps = properties.memory_properties.memory_heaps_as_slice();
    let device_local = |i: &usize| heaps[*i].flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL);
    let largest = (0..heaps.len()).filter(device_local).max_by_key(|&i| heaps[i].size)?;
    Some(budget.heap_budget[largest].saturating_sub(budget.heap_usage[largest]))
}

#[cfg(not(any(target_os = "linux", target_os = "windows")))]
fn reported_budget(_adapter: &wgpu::Adapter) -> Option<u64> {
    None
}

impl std::fmt::Display for BudgetOrigin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            BudgetOrigin::Set => write!(f, "set"),
            BudgetOrigin::Reported { reported, engines } => {
                let (part, whole) = REPORTED_SHARE;
                write!(f, "{part}/{whole} of the {} the driver offers", size(reported))?;
                match engines {
                    1 => Ok(()),
                    n => write!(f, ", split among {n} engines"),
                }
            }
            BudgetOrigin::Fixed => write!(f, "fixed for the adapter's kind"),
        }
    }
}

/// Bytes as GiB or MiB.
pub(crate) fn size(bytes: u64) -> String {
    if bytes >= 1 << 30 {
        format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
    } else {
        format!("{} MiB", bytes >> 20)
    }
}

#[cfg(all(test, any(target_os = "linux", target_os = "windows")))]
mod tests {
    use super::*;

    /// Every Vulkan adapter whose driver offers the memory budget reports one, no larger than
    /// the heap it belongs to; others report none.
    #[test]
    fn vulkan_drivers_report_a_budget_within_the_heap() {
        let (_instance, adapters) = super::super::context::discover();
        for adapter in &adapters {
            let info = adapter.get_info();
            let reported = reported_budget(adapter);
            // SAFETY: read only, as in `reported_budget`.
            let offers = unsafe { adapter.as_hal::<wgpu::hal::api::Vulkan>() }.is_some_and(|hal| {
                hal.physical_device_capabilities().supports_extension(ash::ext::memory_budget::NAME)
            });
            assert_eq!(reported.is_some(), offers, "{}: {reported:?}", info.name);
            if let Some(bytes) = reported {
                assert!(bytes > 0 && bytes < 1 << 44, "{}: {bytes}", info.name);
            }
            let (budget, origin) = default_budget(adapter, 2);
            match origin {
                BudgetOrigin::Reported { reported: r, engines: 2 } => assert!(budget <= r / 2),
                BudgetOrigin::Fixed => assert!(budget >= SHARED_MEMORY_BUDGET),
                other => panic!("{}: {other:?}", info.name),
            }
        }
    }
}
