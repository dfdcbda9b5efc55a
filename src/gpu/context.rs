//! Adapter choice, device creation and error capture.
//!
//! wgpu's default handler for uncaptured errors panics; knng installs its own, records every
//! error and device loss, and turns them into [`Error`]s at the next synchronisation point.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::error::{Error, Result};

/// How long [`Context::wait_for`] checks a submission without blocking before it sleeps:
/// longer than the select-only benchmark's submissions, short against a graph's.
const SPIN: Duration = Duration::from_millis(5);

/// Errors reported by wgpu callbacks since the last check.
#[derive(Default)]
pub(crate) struct ErrorLog {
    errors: Mutex<Vec<wgpu::Error>>,
    lost: Mutex<Option<String>>,
}

impl ErrorLog {
    /// Turns recorded problems into an error, out-of-memory first.
    pub fn check(&self) -> Result<()> {
        if let Some(reason) = self.lost.lock().unwrap_or_else(|e| e.into_inner()).clone() {
            return Err(Error::DeviceLost(reason));
        }
        let mut errors = self.errors.lock().unwrap_or_else(|e| e.into_inner());
        if errors.is_empty() {
            return Ok(());
        }
        let oom = errors.iter().any(|e| matches!(e, wgpu::Error::OutOfMemory { .. }));
        let text = errors.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("; ");
        errors.clear();
        Err(if oom { Error::OutOfMemory(text) } else { Error::Gpu(text) })
    }
}

/// Every adapter that runs compute shaders, with the instance that owns them.
///
/// `WGPU_BACKEND` (e.g. `gl`, `vulkan`) picks the backends. Otherwise the native APIs
/// (Vulkan, Metal, DX12) are asked first and GL only when they offer nothing: probing GL
/// starts EGL, which is slow and noisy on headless machines.
pub(crate) fn discover() -> (wgpu::Instance, Vec<wgpu::Adapter>) {
    let from_env = std::env::var_os("WGPU_BACKEND").is_some();
    let tiers =
        if from_env { vec![None] } else { vec![Some(wgpu::Backends::PRIMARY), Some(wgpu::Backends::SECONDARY)] };
    let mut last = None;
    for tier in tiers {
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
        // Buffers past the driver's memory budget are refused with an out-of-memory error,
        // which the engine handles, instead of being paged (`budget`).
        desc.memory_budget_thresholds.for_resource_creation = Some(super::budget::REFUSE_AT_PERCENT);
        if let Some(backends) = tier {
            desc.backends = backends;
        }
        let instance = wgpu::Instance::new(desc);
        let adapters: Vec<wgpu::Adapter> = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::all()))
            .into_iter()
            .filter(|a| a.get_downlevel_capabilities().flags.contains(wgpu::DownlevelFlags::COMPUTE_SHADERS))
            .collect();
        if !adapters.is_empty() {
            return (instance, adapters);
        }
        last = Some(instance);
    }
    (last.expect("at least one tier is tried"), Vec::new())
}

pub(crate) fn is_hardware(info: &wgpu::AdapterInfo) -> bool {
    matches!(
        info.device_type,
        wgpu::DeviceType::DiscreteGpu | wgpu::DeviceType::IntegratedGpu | wgpu::DeviceType::VirtualGpu
    )
}

/// Preference order: discrete, integrated, virtual, software; native APIs before GL.
fn preference(info: &wgpu::AdapterInfo) -> (u8, u8) {
    let kind = match info.device_type {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Cpu => 3,
        wgpu::DeviceType::Other => 4,
    };
    (kind, u8::from(info.backend == wgpu::Backend::Gl))
}

/// The adapter `wanted` names (index or part of the name), or the preferred one. With
/// `hardware_only`, software adapters are never chosen automatically.
pub(crate) fn choose_adapter(adapters: &[wgpu::Adapter], wanted: Option<&str>, hardware_only: bool) -> Result<usize> {
    if adapters.is_empty() {
        return Err(Error::NoAdapter(
            "wgpu found no adapter with compute shaders (install a Vulkan driver, e.g. mesa-vulkan-drivers, or use --backend cpu)".into(),
        ));
    }
    if let Some(w) = wanted {
        if let Ok(i) = w.parse::<usize>() {
            return if i < adapters.len() {
                Ok(i)
            } else {
                Err(Error::arg(
                    "adapter",
                    format!("index {i} is out of range: there are {} adapters (see `knng info`)", adapters.len()),
                ))
            };
        }
        let lower = w.to_lowercase();
        return adapters
            .iter()
            .position(|a| a.get_info().name.to_lowercase().contains(&lower))
            .ok_or_else(|| Error::arg("adapter", format!("no adapter name contains {w:?} (see `knng info`)")));
    }
    (0..adapters.len())
        .filter(|&i| !hardware_only || is_hardware(&adapters[i].get_info()))
        .min_by_key(|&i| preference(&adapters[i].get_info()))
        .ok_or_else(|| Error::NoAdapter("only software adapters were found".into()))
}

/// The machine's identical hardware GPUs, when it has more than one: the adapter `auto`
/// chooses and every other of the same name on the same backend, as indices. Empty otherwise.
pub(crate) fn identical_gpus() -> Vec<usize> {
    let (_instance, adapters) = discover();
    let Ok(chosen) = choose_adapter(&adapters, None, true) else { return Vec::new() };
    let info = adapters[chosen].get_info();
    let twins: Vec<usize> = (0..adapters.len())
        .filter(|&i| {
            let other = adapters[i].get_info();
            other.name == info.name && other.backend == info.backend && is_hardware(&other)
        })
        .collect();
    if twins.len() > 1 {
        twins
    } else {
        Vec::new()
    }
}

/// Why an adapter that wgpu lists could not open a device, and what to use instead.
fn device_failure(info: &wgpu::AdapterInfo, error: &str) -> String {
    let opened = format!("{} ({:?} backend) could not open a device: {error}", info.name, info.backend);
    if info.backend == wgpu::Backend::Gl {
        format!(
            "{opened}. wgpu's GL backend needs OpenGL 4.3 or OpenGL ES 3.1 for compute shaders, and this \
             driver's context offers less; use the Vulkan driver instead (unset WGPU_BACKEND or set it to \
             vulkan; on NVIDIA install libvulkan1 and the glvnd libraries), or --backend cpu"
        )
    } else {
        format!("{opened}; check the driver with VK_LOADER_DEBUG=error,driver (Vulkan), or use --backend cpu")
    }
}

/// An open device with knng's error handling installed.
pub(crate) struct Context {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub info: wgpu::AdapterInfo,
    pub limits: wgpu::Limits,
    pub subgroups: bool,
    /// `subgroupBarrier` (`SUBGROUP_BARRIER`): lanes meet again after a branch, which shuffles
    /// after divergent code need on adapters that do not reconverge by themselves.
    pub subgroup_barrier: bool,
    /// f64 in shaders (`SHADER_F64`): candidates are re-ranked exactly on the GPU.
    pub f64: bool,
    /// Timestamp queries inside compute passes are enabled (profiling).
    pub timestamps: bool,
    /// Buffers the host maps may also be bound as storage (`MAPPABLE_PRIMARY_BUFFERS`):
    /// kernels write answers straight into the read-back memory.
    pub mappable_storage: bool,
    pub log: Arc<ErrorLog>,
}

impl Context {
    pub fn open(adapter: &wgpu::Adapter, use_subgroups: bool, profile: bool) -> Result<Self> {
        let info = adapter.get_info();
        let subgroups = use_subgroups && adapter.features().contains(wgpu::Features::SUBGROUP);
        let timestamp_features = wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES;
        let timestamps = profile && adapter.features().contains(timestamp_features);
        let mut required_features = wgpu::Features::empty();
        if subgroups {
            required_features |= wgpu::Features::SUBGROUP;
        }
        let subgroup_barrier = subgroups && adapter.features().contains(wgpu::Features::SUBGROUP_BARRIER);
        if subgroup_barrier {
            required_features |= wgpu::Features::SUBGROUP_BARRIER;
        }
        if timestamps {
            required_features |= timestamp_features;
        }
        let f64 = adapter.features().contains(wgpu::Features::SHADER_F64);
        if f64 {
            required_features |= wgpu::Features::SHADER_F64;
        }
        let mappable_storage = adapter.features().contains(wgpu::Features::MAPPABLE_PRIMARY_BUFFERS);
        if mappable_storage {
            required_features |= wgpu::Features::MAPPABLE_PRIMARY_BUFFERS;
        }
        let limits = adapter.limits();
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("knng"),
            required_features,
            required_limits: limits.clone(),
            experimental_features: wgpu::ExperimentalFeatures::disabled(),
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        }))
        .map_err(|e| Error::NoAdapter(device_failure(&info, &e.to_string())))?;
        let log = Arc::new(ErrorLog::default());
        let sink = log.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            sink.errors.lock().unwrap_or_else(|p| p.into_inner()).push(e);
        }));
        let sink = log.clone();
        device.set_device_lost_callback(move |reason, message| {
            if reason != wgpu::DeviceLostReason::Destroyed {
                *sink.lost.lock().unwrap_or_else(|p| p.into_inner()) = Some(format!("{reason:?}: {message}"));
            }
        });
        Ok(Context { device, queue, info, limits, subgroups, subgroup_barrier, f64, timestamps, mappable_storage, log })
    }

    /// Waits for all submitted work and reports any error recorded meanwhile.
    pub fn wait(&self) -> Result<()> {
        self.device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| self.wait_failed(e))?;
        self.log.check()
    }

    /// The error for a wait that failed: what the error log recorded, which is the cause when
    /// a submission was refused (a waited-for submission then never existed), else the device
    /// was lost.
    fn wait_failed(&self, e: wgpu::PollError) -> Error {
        match self.log.check() {
            Err(recorded) => recorded,
            Ok(()) => Error::DeviceLost(e.to_string()),
        }
    }

    /// Waits for one submission (and those before it), not for work submitted after it, and
    /// reports any error recorded meanwhile. On hardware adapters the host checks the
    /// submission without blocking for up to `SPIN` first, as CUDA's default synchronisation
    /// spins: the wake-up from a blocking wait is a noticeable share of a short selection
    /// (notes/select.md, "The host's wait").
    pub fn wait_for(&self, submission: wgpu::SubmissionIndex) -> Result<()> {
        // A software adapter runs on the host's cores, which a spinning thread would take.
        let spin = if self.info.device_type == wgpu::DeviceType::Cpu { Duration::ZERO } else { SPIN };
        let spin_until = std::time::Instant::now() + spin;
        loop {
            let check =
                wgpu::PollType::Wait { submission_index: Some(submission.clone()), timeout: Some(Duration::ZERO) };
            match self.device.poll(check) {
                Ok(_) => break,
                Err(wgpu::PollError::Timeout) if std::time::Instant::now() < spin_until => std::hint::spin_loop(),
                Err(wgpu::PollError::Timeout) => {
                    self.device
                        .poll(wgpu::PollType::Wait { submission_index: Some(submission), timeout: None })
                        .map_err(|e| self.wait_failed(e))?;
                    break;
                }
                Err(e) => return Err(self.wait_failed(e)),
            }
        }
        self.log.check()
    }

    /// Runs `f` inside an out-of-memory error scope.
    pub fn allocating<T>(&self, f: impl FnOnce() -> T) -> Result<T> {
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let value = f();
        match pollster::block_on(scope.pop()) {
            Some(e) => Err(Error::OutOfMemory(e.to_string())),
            None => Ok(value),
        }
    }
}

/// One adapter as `knng info` shows it.
#[derive(Clone, Debug)]
pub struct AdapterReport {
    /// Position in the list, usable as `--adapter INDEX`.
    pub index: usize,
    /// wgpu's description of the adapter.
    pub info: wgpu::AdapterInfo,
    /// Whether the adapter offers subgroup operations.
    pub subgroups: bool,
    /// The adapter's limits.
    pub limits: wgpu::Limits,
    /// Optional features that matter to knng which the adapter offers.
    pub features: Vec<&'static str>,
    /// Whether `--backend auto` would use this adapter.
    pub auto_choice: bool,
}

impl fmt::Display for AdapterReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = &self.info;
        writeln!(f, "[{}] {}{}", self.index, i.name, if self.auto_choice { "  <- auto" } else { "" })?;
        writeln!(f, "    backend {:?}, type {:?}, driver {} {}", i.backend, i.device_type, i.driver, i.driver_info)?;
        if self.subgroups {
            writeln!(f, "    subgroups: sizes {} to {}", i.subgroup_min_size, i.subgroup_max_size)?;
        } else {
            writeln!(f, "    subgroups: none (select and merges without ballots)")?;
        }
        writeln!(
            f,
            "    features: {}",
            if self.features.is_empty() { "-".to_string() } else { self.features.join(", ") }
        )?;
        write!(
            f,
            "    limits: storage binding {} MiB ({} a shader), buffer {} MiB, workgroup memory {} KiB, invocations {}, workgroups per dimension {}",
            self.limits.max_storage_buffer_binding_size >> 20,
            self.limits.max_storage_buffers_per_shader_stage,
            self.limits.max_buffer_size >> 20,
            self.limits.max_compute_workgroup_storage_size >> 10,
            self.limits.max_compute_invocations_per_workgroup,
            self.limits.max_compute_workgroups_per_dimension
        )
    }
}

/// Every adapter wgpu can see that runs compute shaders, and which one `auto` would pick.
pub fn adapters() -> Vec<AdapterReport> {
    let (_instance, list) = discover();
    let auto = choose_adapter(&list, None, true).ok();
    list.iter()
        .enumerate()
        .map(|(index, a)| {
            let feats = a.features();
            let named = [
                (wgpu::Features::SUBGROUP, "SUBGROUP"),
                (wgpu::Features::SUBGROUP_BARRIER, "SUBGROUP_BARRIER"),
                (wgpu::Features::SHADER_F16, "SHADER_F16"),
                (wgpu::Features::SHADER_F64, "SHADER_F64"),
                (wgpu::Features::TIMESTAMP_QUERY, "TIMESTAMP_QUERY"),
                (wgpu::Features::SHADER_INT64, "SHADER_INT64"),
                (wgpu::Features::MAPPABLE_PRIMARY_BUFFERS, "MAPPABLE_PRIMARY_BUFFERS"),
            ];
            AdapterReport {
                index,
                info: a.get_info(),
                subgroups: feats.contains(wgpu::Features::SUBGROUP),
                limits: a.limits(),
                features: named.iter().filter(|(f, _)| feats.contains(*f)).map(|&(_, n)| n).collect(),
                auto_choice: auto == Some(index),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kernel that fails validation makes its submission fail; waiting for that submission
    /// then reports the validation error, not a lost device (the wait's own complaint, about a
    /// submission index that was never returned, said nothing of the cause).
    #[test]
    fn a_refused_submission_reports_its_validation_error() {
        let (_instance, adapters) = discover();
        let adapter = adapters.first().expect("a GPU adapter (lavapipe in CI)");
        let ctx = Context::open(adapter, false, false).expect("device");
        // subgroupBarrier needs SUBGROUP_BARRIER, which this device did not ask for.
        let source = "@compute @workgroup_size(1) fn main() { subgroupBarrier(); }";
        let module = ctx.device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("invalid"),
            source: wgpu::ShaderSource::Wgsl(source.into()),
        });
        let pipeline = ctx.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some("invalid"),
            layout: None,
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        });
        let mut encoder = ctx.device.create_command_encoder(&Default::default());
        {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            pass.set_pipeline(&pipeline);
            pass.dispatch_workgroups(1, 1, 1);
        }
        let submission = ctx.queue.submit([encoder.finish()]);
        match ctx.wait_for(submission) {
            Err(Error::Gpu(text)) => assert!(text.to_lowercase().contains("invalid"), "{text}"),
            other => panic!("expected the validation error, got {other:?}"),
        }
    }
}
