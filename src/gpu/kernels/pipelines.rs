//! Shader modules, bind-group layouts and compute pipelines: every pipeline is created through
//! [`Pipelines::pipeline`], once per shader, entry point and override constants, and shared by
//! every kernel that asks for the same.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::gpu::context::Context;

/// A bind-group layout and the pipeline of one entry point.
pub(in crate::gpu) struct Kernel {
    pub(in crate::gpu) pipeline: wgpu::ComputePipeline,
    pub(in crate::gpu) layout: wgpu::BindGroupLayout,
}

#[derive(Clone, Copy)]
pub(super) enum Slot {
    Storage { read_only: bool },
}

pub(super) const RO: Slot = Slot::Storage { read_only: true };
pub(super) const RW: Slot = Slot::Storage { read_only: false };

/// How much the runtime guards a shader's memory accesses.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Checks {
    /// wgpu's bounds checks on every access, and its counter in every loop (which ends a loop
    /// that would otherwise never end).
    Checked,
    /// wgpu's bounds checks without the loop counters: for kernels whose every loop ends by
    /// construction (a fixed trip count, a pass limit, a binary search, or a bound below 2^31
    /// stepped by a nonzero constant). The counters cost the select 4-7% of its time (its
    /// passes are bound by instructions per key), the ranking 10% and the exact keys 3%
    /// (`notes/select.md`, version 14).
    EndingLoops,
    /// None: for kernels whose every access is guarded by an explicit range check in the
    /// WGSL itself (the distance GEMM, where the checks cost most of its speed).
    Unchecked,
}

/// A WGSL module: its name, which stands for its source in the caches of one engine, its
/// source, and how much the runtime guards it.
pub(super) struct Shader {
    pub(super) name: &'static str,
    pub(super) source: String,
    pub(super) checks: Checks,
}

/// What a pipeline is cached by: its shader's name, entry point and override constants (their
/// values' bits).
type PipelineKey = (&'static str, &'static str, Vec<(&'static str, u64)>);

/// The engine's shader modules, layouts and pipelines, each created once. Every entry point of
/// a shader is bound through one layout, made with its first kernel.
#[derive(Default)]
pub(super) struct Pipelines {
    modules: Mutex<HashMap<&'static str, wgpu::ShaderModule>>,
    layouts: Mutex<HashMap<&'static str, wgpu::BindGroupLayout>>,
    pipelines: Mutex<HashMap<PipelineKey, wgpu::ComputePipeline>>,
}

impl Pipelines {
    /// A layout for `slots` and the pipeline of `entry` in `shader`; other entry points of the
    /// shader share the layout (`pipeline`).
    pub(super) fn kernel(
        &self,
        ctx: &Context,
        name: &str,
        shader: &Shader,
        entry: &'static str,
        slots: &[Slot],
        constants: &[(&'static str, f64)],
    ) -> Kernel {
        let layout = self
            .layouts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(shader.name)
            .or_insert_with(|| layout(ctx, name, slots))
            .clone();
        let pipeline = self.pipeline(ctx, name, shader, &layout, entry, constants);
        Kernel { pipeline, layout }
    }

    /// The pipeline of `entry` in `shader` with `constants`, bound through `layout` (the
    /// shader's): created on first request, then the same pipeline for every kernel that asks
    /// for this shader, entry point and constants.
    pub(super) fn pipeline(
        &self,
        ctx: &Context,
        name: &str,
        shader: &Shader,
        layout: &wgpu::BindGroupLayout,
        entry: &'static str,
        constants: &[(&'static str, f64)],
    ) -> wgpu::ComputePipeline {
        let key = (shader.name, entry, constants.iter().map(|&(c, v)| (c, v.to_bits())).collect());
        let mut pipelines = self.pipelines.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(pipeline) = pipelines.get(&key) {
            return pipeline.clone();
        }
        let module = self
            .modules
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(shader.name)
            .or_insert_with(|| shader_module(ctx, shader.name, &shader.source, shader.checks))
            .clone();
        let pipeline = pipeline(ctx, name, layout, &module, entry, constants);
        pipelines.insert(key, pipeline.clone());
        pipeline
    }
}

/// A layout of the parameter block (binding 0) and the storage buffers of `slots`.
fn layout(ctx: &Context, name: &str, slots: &[Slot]) -> wgpu::BindGroupLayout {
    let mut entries = vec![wgpu::BindGroupLayoutEntry {
        binding: 0,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer {
            ty: wgpu::BufferBindingType::Uniform,
            has_dynamic_offset: true,
            min_binding_size: None,
        },
        count: None,
    }];
    for (i, slot) in slots.iter().enumerate() {
        let Slot::Storage { read_only } = *slot;
        entries.push(wgpu::BindGroupLayoutEntry {
            binding: i as u32 + 1,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Storage { read_only },
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        });
    }
    ctx.device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor { label: Some(name), entries: &entries })
}

fn shader_module(ctx: &Context, name: &str, source: &str, checks: Checks) -> wgpu::ShaderModule {
    let desc = wgpu::ShaderModuleDescriptor { label: Some(name), source: wgpu::ShaderSource::Wgsl(source.into()) };
    match checks {
        Checks::Checked => ctx.device.create_shader_module(desc),
        // SAFETY: only used for shaders whose loops all end (see `Checks::EndingLoops`); every
        // access is still checked.
        Checks::EndingLoops => unsafe {
            let checks =
                wgpu::ShaderRuntimeChecks { force_loop_bounding: false, ..wgpu::ShaderRuntimeChecks::checked() };
            ctx.device.create_shader_module_trusted(desc, checks)
        },
        // SAFETY: only used for shaders whose storage and workgroup indices are all checked
        // against the buffer extents in the shader (see `Checks::Unchecked`).
        Checks::Unchecked => unsafe {
            ctx.device.create_shader_module_trusted(desc, wgpu::ShaderRuntimeChecks::unchecked())
        },
    }
}

fn pipeline(
    ctx: &Context,
    name: &str,
    layout: &wgpu::BindGroupLayout,
    module: &wgpu::ShaderModule,
    entry: &str,
    constants: &[(&str, f64)],
) -> wgpu::ComputePipeline {
    let pipeline_layout = ctx.device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
        label: Some(name),
        bind_group_layouts: &[Some(layout)],
        immediate_size: 0,
    });
    ctx.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some(name),
        layout: Some(&pipeline_layout),
        module,
        entry_point: Some(entry),
        compilation_options: wgpu::PipelineCompilationOptions { constants, zero_initialize_workgroup_memory: false },
        cache: None,
    })
}
