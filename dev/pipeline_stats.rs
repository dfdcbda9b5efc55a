//! What the Vulkan driver compiled each of knng's compute pipelines to: registers, shared
//! memory, instruction counts, as `VK_KHR_pipeline_executable_properties` reports them (wgpu
//! does not). The registers a kernel needs decide how many of its workgroups an SM runs at
//! once, and the distance GEMM needs two of its 256-invocation workgroups per SM to hide its
//! latencies: epilogue variants that change no work but the code's shape measured up to a
//! third slower (`notes/select.md`, "The two-sided appending epilogue, measured").
//!
//! Each module goes through naga to SPIR-V with the options wgpu's Vulkan backend would use
//! for it (the runtime checks `GpuEngine` builds it with, no workgroup-memory zeroing, the
//! distance kernels' tile constants), and is compiled by the driver with statistics captured.
//!
//!     cargo run --release --example pipeline_stats [NAME-PREFIX...] [NAME=FILE...]
//!     cargo run --release --example pipeline_stats -- --dump NAME > FILE
//!
//! Prints one line per module, entry point and executable, with every statistic. `NAME=FILE`
//! compiles the WGSL in FILE as module NAME would be (a variant under study, written out
//! by `--dump NAME` from a build that has it). Needs a Vulkan driver offering the extension
//! (NVIDIA's, Mesa's); modules needing features the device lacks are skipped with a note.

use ash::vk;
use naga::back::{pipeline_constants, spv};
use naga::valid::{Capabilities, ValidationFlags, Validator};
use std::ffi::CStr;

/// Runtime checks a module is built with (`Checks` in src/gpu/mod.rs).
fn checks(name: &str) -> (bool, bool) {
    // (bounds checks on private and workgroup arrays, loop counters)
    if name.starts_with("distance") {
        (false, false)
    } else if name.starts_with("norms") {
        (true, true)
    } else {
        (true, false)
    }
}

/// Override constants a module's pipelines are made with (`tile_constants` in src/gpu/mod.rs).
fn constants(name: &str) -> naga::back::PipelineConstants {
    let mut map = naga::back::PipelineConstants::default();
    if name.starts_with("distance") {
        map.insert("BM".into(), 128.0);
        map.insert("BN".into(), 128.0);
        map.insert("BK".into(), 16.0);
    }
    map
}

fn spirv(name: &str, source: &str, entry: &str, f64: bool) -> Result<Vec<u32>, String> {
    let module = naga::front::wgsl::parse_str(source).map_err(|e| e.emit_to_string(source))?;
    let mut caps = Capabilities::SUBGROUP | Capabilities::SUBGROUP_BARRIER;
    if f64 {
        caps |= Capabilities::FLOAT64;
    }
    let info = Validator::new(ValidationFlags::all(), caps).validate(&module).map_err(|e| format!("{e:?}"))?;
    let (module, info) =
        pipeline_constants::process_overrides(&module, &info, None, &constants(name)).map_err(|e| format!("{e}"))?;
    let (bounds, loops) = checks(name);
    let index = if bounds { naga::proc::BoundsCheckPolicy::Restrict } else { naga::proc::BoundsCheckPolicy::Unchecked };
    let options = spv::Options {
        lang_version: (1, 6),
        bounds_check_policies: naga::proc::BoundsCheckPolicies {
            index,
            // Robust buffer access covers storage buffers on the drivers knng runs on.
            buffer: naga::proc::BoundsCheckPolicy::Unchecked,
            image_load: naga::proc::BoundsCheckPolicy::Unchecked,
            binding_array: naga::proc::BoundsCheckPolicy::Unchecked,
        },
        zero_initialize_workgroup_memory: spv::ZeroInitializeWorkgroupMemoryMode::None,
        force_loop_bounding: loops,
        emit_int_div_checks: bounds,
        ..Default::default()
    };
    let pipeline = spv::PipelineOptions { shader_stage: naga::ShaderStage::Compute, entry_point: entry.into() };
    spv::write_vec(&module, &info, &options, Some(&pipeline)).map_err(|e| format!("{e}"))
}

/// The module's entry points and its descriptor bindings (set 0).
fn interface(source: &str) -> (Vec<String>, Vec<vk::DescriptorSetLayoutBinding<'static>>) {
    let module = naga::front::wgsl::parse_str(source).expect("validated by the shader tests");
    let entries = module.entry_points.iter().map(|e| e.name.clone()).collect();
    let bindings = module
        .global_variables
        .iter()
        .filter_map(|(_, var)| {
            let binding = var.binding.as_ref()?;
            let ty = match var.space {
                naga::AddressSpace::Uniform => vk::DescriptorType::UNIFORM_BUFFER_DYNAMIC,
                naga::AddressSpace::Storage { .. } => vk::DescriptorType::STORAGE_BUFFER,
                _ => return None,
            };
            Some(
                vk::DescriptorSetLayoutBinding::default()
                    .binding(binding.binding)
                    .descriptor_type(ty)
                    .descriptor_count(1)
                    .stage_flags(vk::ShaderStageFlags::COMPUTE),
            )
        })
        .collect();
    (entries, bindings)
}

fn text(chars: &[std::ffi::c_char]) -> String {
    // SAFETY: the driver fills these fixed arrays with NUL-terminated strings.
    unsafe { CStr::from_ptr(chars.as_ptr()) }.to_string_lossy().into_owned()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let modules = knng::gpu_shader_sources();
    if let [flag, name] = args.as_slice() {
        if flag == "--dump" {
            let m = modules.iter().find(|m| m.name == name).ok_or_else(|| format!("no module {name}"))?;
            print!("{}", m.source);
            return Ok(());
        }
    }
    // (name, source, needs f64) of every module asked for: those named by a prefix, every one
    // when no argument names any, and the files given.
    let (files, prefixes): (Vec<&String>, Vec<&String>) = args.iter().partition(|a| a.contains('='));
    let named = |name: &str| prefixes.iter().any(|p| name.starts_with(p.as_str()));
    let mut chosen: Vec<(String, String, bool)> = modules
        .iter()
        .filter(|m| named(m.name) || args.is_empty())
        .map(|m| (m.name.to_string(), m.source.clone(), m.f64))
        .collect();
    for (name, path) in files.iter().filter_map(|a| a.split_once('=')) {
        let f64 = modules.iter().find(|m| m.name == name).is_some_and(|m| m.f64);
        chosen.push((format!("{name}={path}"), std::fs::read_to_string(path)?, f64));
    }
    // SAFETY: every Vulkan call below follows the specification's valid usage: handles are
    // created before use and destroyed after, and structures outlive the calls taking them.
    unsafe {
        let entry = ash::Entry::load()?;
        let app = vk::ApplicationInfo::default().api_version(vk::API_VERSION_1_3);
        let instance = entry.create_instance(&vk::InstanceCreateInfo::default().application_info(&app), None)?;
        let wanted = ash::khr::pipeline_executable_properties::NAME;
        let physical = instance
            .enumerate_physical_devices()?
            .into_iter()
            .find(|&pd| {
                instance
                    .enumerate_device_extension_properties(pd)
                    .is_ok_and(|exts| exts.iter().any(|e| e.extension_name_as_c_str() == Ok(wanted)))
            })
            .ok_or("no Vulkan device offers VK_KHR_pipeline_executable_properties")?;
        let props = instance.get_physical_device_properties(physical);
        let features = instance.get_physical_device_features(physical);
        println!("device: {} (driver version {:#x})", text(&props.device_name), props.driver_version);
        let f64 = features.shader_float64 == vk::TRUE;
        let queue = instance
            .get_physical_device_queue_family_properties(physical)
            .iter()
            .position(|q| q.queue_flags.contains(vk::QueueFlags::COMPUTE))
            .ok_or("no compute queue")? as u32;
        let priorities = [1.0];
        let queues = [vk::DeviceQueueCreateInfo::default().queue_family_index(queue).queue_priorities(&priorities)];
        let extensions = [wanted.as_ptr()];
        let mut exec =
            vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default().pipeline_executable_info(true);
        let enabled =
            vk::PhysicalDeviceFeatures::default().shader_float64(f64).shader_int64(features.shader_int64 == vk::TRUE);
        let info = vk::DeviceCreateInfo::default()
            .queue_create_infos(&queues)
            .enabled_extension_names(&extensions)
            .enabled_features(&enabled)
            .push_next(&mut exec);
        let device = instance.create_device(physical, &info, None)?;
        let stats = ash::khr::pipeline_executable_properties::Device::new(&instance, &device);

        for (name, source, needs_f64) in &chosen {
            if *needs_f64 && !f64 {
                println!("{name}: skipped (needs shaderFloat64)");
                continue;
            }
            let (entries, bindings) = interface(source);
            let set_layout = device.create_descriptor_set_layout(
                &vk::DescriptorSetLayoutCreateInfo::default().bindings(&bindings),
                None,
            )?;
            let set_layouts = [set_layout];
            let layout = device
                .create_pipeline_layout(&vk::PipelineLayoutCreateInfo::default().set_layouts(&set_layouts), None)?;
            for entry_name in entries {
                let code = match spirv(name, source, &entry_name, *needs_f64) {
                    Ok(code) => code,
                    Err(e) => {
                        println!("{} {entry_name}: no SPIR-V: {e}", name);
                        continue;
                    }
                };
                let module = device.create_shader_module(&vk::ShaderModuleCreateInfo::default().code(&code), None)?;
                let entry_c = std::ffi::CString::new(entry_name.as_str())?;
                let stage = vk::PipelineShaderStageCreateInfo::default()
                    .stage(vk::ShaderStageFlags::COMPUTE)
                    .module(module)
                    .name(&entry_c);
                let create = [vk::ComputePipelineCreateInfo::default()
                    .stage(stage)
                    .layout(layout)
                    .flags(vk::PipelineCreateFlags::CAPTURE_STATISTICS_KHR)];
                let pipeline = match device.create_compute_pipelines(vk::PipelineCache::null(), &create, None) {
                    Ok(p) => p[0],
                    Err((_, e)) => {
                        println!("{} {entry_name}: the driver refused it: {e}", name);
                        device.destroy_shader_module(module, None);
                        continue;
                    }
                };
                let executables =
                    stats.get_pipeline_executable_properties(&vk::PipelineInfoKHR::default().pipeline(pipeline))?;
                for (i, exe) in executables.iter().enumerate() {
                    let info = vk::PipelineExecutableInfoKHR::default().pipeline(pipeline).executable_index(i as u32);
                    let values: Vec<String> = stats
                        .get_pipeline_executable_statistics(&info)?
                        .iter()
                        .map(|s| {
                            let v = match s.format {
                                vk::PipelineExecutableStatisticFormatKHR::BOOL32 => s.value.b32.to_string(),
                                vk::PipelineExecutableStatisticFormatKHR::INT64 => s.value.i64.to_string(),
                                vk::PipelineExecutableStatisticFormatKHR::UINT64 => s.value.u64.to_string(),
                                vk::PipelineExecutableStatisticFormatKHR::FLOAT64 => format!("{:.3}", s.value.f64),
                                _ => "?".into(),
                            };
                            format!("{}={v}", text(&s.name))
                        })
                        .collect();
                    println!(
                        "{} {entry_name} [{}, subgroup {}]: {}",
                        name,
                        text(&exe.name),
                        exe.subgroup_size,
                        values.join(", ")
                    );
                }
                device.destroy_pipeline(pipeline, None);
                device.destroy_shader_module(module, None);
            }
            device.destroy_pipeline_layout(layout, None);
            device.destroy_descriptor_set_layout(set_layout, None);
        }
        device.destroy_device(None);
        instance.destroy_instance(None);
    }
    Ok(())
}
