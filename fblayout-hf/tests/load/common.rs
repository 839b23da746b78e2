//! Paths of the fixtures, and reading them with the safetensors crate directly (the reference
//! the crate's own reading is compared with).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use safetensors::{Dtype, SafeTensors};

/// The tiny fixture models.
pub(crate) const ARCHS: [&str; 3] = ["bert", "gpt2", "llama"];

/// `tests/fixtures` of the repository.
pub(crate) fn fixtures() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    root.join("tests/fixtures")
}

/// `tests/fixtures/hf/<arch>`.
pub(crate) fn hf(arch: &str) -> PathBuf {
    fixtures().join("hf").join(arch)
}

/// `tests/fixtures/hf/<arch>/model`.
pub(crate) fn model_dir(arch: &str) -> PathBuf {
    hf(arch).join("model")
}

/// `tests/fixtures/hf/<arch>/fixture.json`.
pub(crate) fn fixture_json(dir: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(dir.join("fixture.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Every tensor of a safetensors file as the safetensors crate reads it: dtype, shape, bytes.
pub(crate) fn read_all(path: &Path) -> BTreeMap<String, (Dtype, Vec<usize>, Vec<u8>)> {
    let bytes = std::fs::read(path).unwrap();
    let file = SafeTensors::deserialize(&bytes).unwrap();
    file.tensors()
        .into_iter()
        .map(|(name, view)| {
            let entry = (view.dtype(), view.shape().to_vec(), view.data().to_vec());
            (name, entry)
        })
        .collect()
}

/// An I64 tensor of a safetensors file, as rows of `u32` (the fixtures' token tensors).
pub(crate) fn i64_rows(path: &Path, name: &str) -> Vec<Vec<u32>> {
    let all = read_all(path);
    let (dtype, shape, bytes) = &all[name];
    assert_eq!(*dtype, Dtype::I64, "{name}");
    let values: Vec<u32> = bytes
        .chunks_exact(8)
        .map(|b| u32::try_from(i64::from_le_bytes(b.try_into().unwrap())).unwrap())
        .collect();
    values.chunks(shape[1]).map(<[u32]>::to_vec).collect()
}

/// Writes a safetensors file of `tensors` (name, dtype, shape, little-endian bytes).
pub(crate) fn write_safetensors(path: &Path, tensors: &[(String, Dtype, Vec<usize>, Vec<u8>)]) {
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = tensors
        .iter()
        .map(|(name, dtype, shape, bytes)| {
            let view = safetensors::tensor::TensorView::new(*dtype, shape.clone(), bytes).unwrap();
            (name.clone(), view)
        })
        .collect();
    let bytes = safetensors::serialize(views, None).unwrap();
    std::fs::write(path, bytes).unwrap();
}
