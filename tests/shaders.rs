//! Every WGSL module is valid for naga and translates to SPIR-V (Vulkan), MSL (Apple) and
//! HLSL (Windows), so a shader change that breaks one platform fails here, without its GPU.

use naga::back::{hlsl, msl, pipeline_constants, spv};
use naga::valid::{Capabilities, ValidationFlags, Validator};

fn validate(name: &str, source: &str, subgroups: bool, f64: bool) -> (naga::Module, naga::valid::ModuleInfo) {
    let module =
        naga::front::wgsl::parse_str(source).unwrap_or_else(|e| panic!("{name}: {}", e.emit_to_string(source)));
    let mut caps = Capabilities::empty();
    if subgroups {
        caps |= Capabilities::SUBGROUP | Capabilities::SUBGROUP_BARRIER;
    }
    if f64 {
        caps |= Capabilities::FLOAT64;
    }
    let info = Validator::new(ValidationFlags::all(), caps)
        .validate(&module)
        .unwrap_or_else(|e| panic!("{name}: {}", e.emit_to_string(source)));
    // Resolve override constants to their defaults, as pipeline creation would.
    let (module, info) = pipeline_constants::process_overrides(&module, &info, None, &Default::default())
        .unwrap_or_else(|e| panic!("{name}: overrides: {e}"));
    (module.into_owned(), info.into_owned())
}

#[test]
fn shaders_validate_and_translate_for_every_platform() {
    let modules = knng::gpu_shader_sources();
    assert_eq!(modules.len(), 20, "a shader module was added or lost; update this test");
    let distance = modules.iter().find(|m| m.name == "distance").expect("distance module");
    assert!(
        distance.source.contains("const k = 15u;") && !distance.source.contains("for (var k = 0u; k < BK; k++)"),
        "the distance kernel's k loop was not unrolled"
    );
    assert!(
        distance.source.contains("const half = 1u;") && !distance.source.contains("for (var j = 0u; j < 4u; j++)"),
        "the distance kernel's epilogue loops were not unrolled"
    );
    let refine4 = modules.iter().find(|m| m.name == "refine_vec4").expect("refine_vec4 module");
    assert!(
        refine4.source.contains("const u = 3u;") && !refine4.source.contains("for (var u = 0u; u < DEPTH; u++)"),
        "the vec4 exact-key kernel's load loops were not unrolled"
    );
    let short = modules.iter().find(|m| m.name == "bounded_lists").expect("bounded_lists module");
    assert!(
        short.source.contains("const j = 15u;") && !short.source.contains("for (var j = 0u; j < PER; j++)"),
        "the short select's register loops were not unrolled"
    );
    for m in modules {
        let name = m.name;
        let (module, info) = validate(name, &m.source, m.subgroups, m.f64);

        let spirv = spv::write_vec(&module, &info, &spv::Options::default(), None)
            .unwrap_or_else(|e| panic!("{name}: SPIR-V: {e}"));
        assert!(spirv.len() > 100, "{name}: SPIR-V output is implausibly short");

        // Metal has no f64: modules that need it are only built where SHADER_F64 exists.
        if !m.f64 {
            let msl_options = msl::Options { lang_version: (2, 4), ..Default::default() };
            let pipeline = msl::PipelineOptions::default();
            let (msl_source, _) = msl::write_string(&module, &info, &msl_options, &pipeline)
                .unwrap_or_else(|e| panic!("{name}: MSL: {e}"));
            assert!(msl_source.contains("kernel"), "{name}: MSL has no kernel");
        }

        let hlsl_options = hlsl::Options { shader_model: hlsl::ShaderModel::V6_0, ..Default::default() };
        let mut hlsl_source = String::new();
        hlsl::Writer::new(&mut hlsl_source, &hlsl_options, &Default::default())
            .write(&module, &info, None)
            .unwrap_or_else(|e| panic!("{name}: HLSL: {e}"));
        assert!(hlsl_source.contains("numthreads"), "{name}: HLSL has no compute entry");
    }
}
