//! Why a machine with a GPU shows none to wgpu: device nodes without a Vulkan driver that
//! loads, and adapters whose device cannot be opened.

use std::path::{Path, PathBuf};

use super::AdapterReport;

/// Device nodes that a GPU driver creates: NVIDIA's, DRM render nodes (AMD, Intel, Mesa) and
/// AMD's compute node.
fn gpu_device_nodes(dev: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let listed = |dir: &Path| std::fs::read_dir(dir).into_iter().flatten().flatten().map(|e| e.path());
    for path in listed(dev) {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if name.strip_prefix("nvidia").is_some_and(|rest| rest.chars().all(|c| c.is_ascii_digit()) && !rest.is_empty())
            || name == "kfd"
        {
            found.push(path);
        }
    }
    found.extend(
        listed(&dev.join("dri")).filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("renderD"))),
    );
    found.sort();
    found
}

/// A warning for a machine that shows GPU device nodes but no hardware adapter in
/// `adapters`, naming the nodes, the likely cause and the fix; `None` where there is nothing
/// to say (a hardware adapter was found, or the machine shows no GPU).
pub fn missing_gpu_hint(adapters: &[AdapterReport]) -> Option<String> {
    hint_for(Path::new("/dev"), adapters)
}

fn hint_for(dev: &Path, adapters: &[AdapterReport]) -> Option<String> {
    let hardware = adapters.iter().any(|a| super::context::is_hardware(&a.info));
    if hardware {
        return None;
    }
    let nodes = gpu_device_nodes(dev);
    if nodes.is_empty() {
        return None;
    }
    let shown: Vec<String> = nodes.iter().take(4).map(|p| p.display().to_string()).collect();
    Some(format!(
        "this machine has GPU devices ({}) but wgpu found no hardware adapter: the GPU's Vulkan driver \
         did not load. Install the Vulkan loader and the glvnd libraries (Debian and Ubuntu: libvulkan1 \
         libegl1 libglvnd0 libgl1), check that the driver's ICD file exists (/usr/share/vulkan/icd.d, \
         /etc/vulkan/icd.d, or the file VK_DRIVER_FILES names), and run with VK_LOADER_DEBUG=error,driver \
         to see why the loader fails",
        shown.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_nodes_without_adapters_are_explained() {
        let dev = tempfile::tempdir().unwrap();
        assert_eq!(hint_for(dev.path(), &[]), None);
        for name in ["nvidiactl", "nvidia-uvm", "null"] {
            std::fs::write(dev.path().join(name), b"").unwrap();
        }
        assert_eq!(hint_for(dev.path(), &[]), None, "control nodes alone are no GPU");
        std::fs::write(dev.path().join("nvidia0"), b"").unwrap();
        std::fs::create_dir(dev.path().join("dri")).unwrap();
        std::fs::write(dev.path().join("dri").join("renderD128"), b"").unwrap();
        let hint = hint_for(dev.path(), &[]).expect("a hint");
        assert!(hint.contains("nvidia0") && hint.contains("renderD128"), "{hint}");
        assert!(hint.contains("libvulkan1") && hint.contains("VK_LOADER_DEBUG"), "{hint}");
    }
}
