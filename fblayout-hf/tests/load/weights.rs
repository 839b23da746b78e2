//! Opening single safetensors files and reading tensors: the fixtures against the safetensors
//! crate, f16/bf16 decoding, and broken files.

use std::path::{Path, PathBuf};

use fblayout_hf::weights::{Checkpoint, Dtype, TensorInfo, WeightsError};

use crate::common::{ARCHS, fixture_json, hf, model_dir, read_all, write_safetensors};

fn weights(arch: &str) -> PathBuf {
    model_dir(arch).join("model.safetensors")
}

#[test]
fn fixtures_list_and_read_like_the_safetensors_crate() {
    for arch in ARCHS {
        let path = weights(arch);
        let checkpoint = Checkpoint::open(&path).unwrap();
        let reference = read_all(&path);
        let listed: Vec<TensorInfo> = checkpoint.tensors().cloned().collect();
        let expected: Vec<TensorInfo> = reference
            .iter()
            .map(|(name, (dtype, shape, _))| TensorInfo {
                name: name.clone(),
                dtype: *dtype,
                shape: shape.clone(),
            })
            .collect();
        assert_eq!(listed, expected, "{arch}");
        for (name, (_, shape, bytes)) in &reference {
            let values = checkpoint.read_f32(name).unwrap();
            let direct: Vec<f32> = bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
                .collect();
            assert_eq!(
                values.len(),
                shape.iter().product::<usize>(),
                "{arch} {name}"
            );
            assert!(
                values
                    .iter()
                    .zip(&direct)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "{arch} {name}"
            );
            assert_eq!(checkpoint.raw(name).unwrap().bytes, &bytes[..]);
            assert_eq!(checkpoint.file_of(name), Some(path.as_path()));
        }
    }
}

#[test]
fn fixtures_hold_the_parameters_the_parity_fixtures_train() {
    // full.safetensors has `grad.<name>` for every parameter, of the parameter's shape:
    // what the training code will read from model.safetensors, by the same names.
    for arch in ARCHS {
        let checkpoint = Checkpoint::open(weights(arch)).unwrap();
        let full = read_all(&hf(arch).join("full.safetensors"));
        let params = fixture_json(&hf(arch))["params"].clone();
        let params: Vec<String> = serde_json::from_value(params).unwrap();
        assert_eq!(params.len(), checkpoint.len(), "{arch}");
        for name in &params {
            let info = checkpoint
                .get(name)
                .unwrap_or_else(|| panic!("{arch}: no {name}"));
            let (_, grad_shape, _) = &full[&format!("grad.{name}")];
            assert_eq!(&info.shape, grad_shape, "{arch} {name}");
            assert_eq!(info.dtype, Dtype::F32);
        }
    }
}

/// Writes one tensor per (name, dtype, shape, bytes) to `dir/name.safetensors`.
fn one_file(dir: &Path, tensors: &[(&str, Dtype, Vec<usize>, Vec<u8>)]) -> PathBuf {
    let path = dir.join("t.safetensors");
    let owned: Vec<_> = tensors
        .iter()
        .map(|(n, d, s, b)| (n.to_string(), *d, s.clone(), b.clone()))
        .collect();
    write_safetensors(&path, &owned);
    path
}

fn u16_bytes(bits: &[u16]) -> Vec<u8> {
    bits.iter().flat_map(|b| b.to_le_bytes()).collect()
}

#[test]
fn f16_and_bf16_decode_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let f16_bits = [
        0x3C00, 0xC000, 0x3555, 0x7BFF, 0x0001, 0x0400, 0x7C00, 0x8000, 0x7E00,
    ];
    let bf16_bits = [0x3F80, 0xC040, 0x3EAB, 0x7F7F, 0x0001, 0xFF80];
    let path = one_file(
        dir.path(),
        &[
            ("h", Dtype::F16, vec![3, 3], u16_bytes(&f16_bits)),
            ("b", Dtype::BF16, vec![6], u16_bytes(&bf16_bits)),
        ],
    );
    let checkpoint = Checkpoint::open(&path).unwrap();
    let h = checkpoint.read_f32("h").unwrap();
    // Sign · 2^(exponent − 15) · (1 + mantissa / 1024), worked out by hand.
    let expected_h = [
        1.0,             // 0 01111 0000000000
        -2.0,            // 1 10000 0000000000
        1365.0 / 4096.0, // 0 01101 0101010101: 2^-2 · 1365/1024
        65504.0,         // the largest half: 2^15 · 2047/1024
        2f32.powi(-24),  // the smallest subnormal: 2^-14 · 1/1024
        2f32.powi(-14),  // the smallest normal
        f32::INFINITY,   // 0 11111 0000000000
        -0.0,            // 1 00000 0000000000
    ];
    for (i, (got, want)) in h.iter().zip(expected_h).enumerate() {
        assert_eq!(got.to_bits(), want.to_bits(), "f16 #{i}: {got} != {want}");
    }
    assert!(h[8].is_nan());
    // bf16 is the top half of an f32: sign · 2^(exponent − 127) · (1 + mantissa / 128).
    let b = checkpoint.read_f32("b").unwrap();
    let expected_b = [
        1.0,
        -3.0,                                   // 1 10000000 1000000
        171.0 / 512.0,                          // 0 01111101 0101011: 2^-2 · 171/128
        (2.0 - 2f32.powi(-7)) * 2f32.powi(127), // the largest bf16
        2f32.powi(-126) * 2f32.powi(-7),        // the smallest subnormal: 2^-126 · 2^-7
        f32::NEG_INFINITY,
    ];
    for (i, (got, want)) in b.iter().zip(expected_b).enumerate() {
        assert_eq!(got.to_bits(), want.to_bits(), "bf16 #{i}: {got} != {want}");
    }
}

#[test]
fn other_dtypes_and_unknown_names_are_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = one_file(
        dir.path(),
        &[
            ("ids", Dtype::I64, vec![2], vec![0; 16]),
            ("wide", Dtype::F64, vec![1], 1f64.to_le_bytes().to_vec()),
        ],
    );
    let checkpoint = Checkpoint::open(&path).unwrap();
    for (name, dtype) in [("ids", Dtype::I64), ("wide", Dtype::F64)] {
        let err = checkpoint.read_f32(name).unwrap_err();
        assert!(
            matches!(&err, WeightsError::UnsupportedDtype { file, tensor, dtype: d } if file == &path && tensor == name && *d == dtype),
            "{err:?}"
        );
        assert!(
            err.to_string().contains(&format!("`{name}` is {dtype}")),
            "{err}"
        );
    }
    let err = checkpoint.read_f32("nope").unwrap_err();
    assert!(matches!(&err, WeightsError::UnknownTensor { tensor, .. } if tensor == "nope"));
    assert!(
        err.to_string().contains("t.safetensors: no tensor `nope`"),
        "{err}"
    );
}

/// The bert fixture's bytes with `edit` applied, written to a temp file and opened.
fn broken(edit: impl FnOnce(&mut Vec<u8>)) -> (tempfile::TempDir, PathBuf, WeightsError) {
    let mut bytes = std::fs::read(weights("bert")).unwrap();
    edit(&mut bytes);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.safetensors");
    std::fs::write(&path, &bytes).unwrap();
    let err = Checkpoint::open(&path).unwrap_err();
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "the message names the file: {err}"
    );
    (dir, path, err)
}

fn header_len() -> usize {
    let bytes = std::fs::read(weights("bert")).unwrap();
    u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize
}

#[test]
fn truncated_files() {
    let full = std::fs::metadata(weights("bert")).unwrap().len();
    let header_end = 8 + header_len();
    // Cut inside the length, inside the header, at the data's start, inside it, one byte short.
    for keep in [
        0,
        5,
        8 + 10,
        header_end,
        header_end + 1000,
        full as usize - 1,
    ] {
        let (_dir, _, err) = broken(|b| b.truncate(keep));
        let WeightsError::Truncated {
            len,
            expected,
            tensors,
            ..
        } = &err
        else {
            panic!("keeping {keep} bytes: {err:?}");
        };
        assert_eq!(*len, keep as u64);
        if keep >= header_end {
            assert_eq!(*expected, full, "{err}");
            // The data's last tensor (by offset) is always cut; at the data's start all are.
            assert!(!tensors.is_empty(), "{err}");
            if keep == header_end {
                assert_eq!(tensors.len(), 41, "{err}");
            }
        } else {
            assert!(tensors.is_empty());
        }
    }
    let (_dir, _, err) = broken(|b| b.truncate(full as usize - 1));
    let message = err.to_string();
    assert!(message.contains("truncated"), "{message}");
    assert!(message.contains("cut short: `"), "{message}");
}

#[test]
fn corrupt_files() {
    // The header is not JSON.
    let (_d, _, err) = broken(|b| b[8..16].copy_from_slice(b"garbage!"));
    assert!(matches!(err, WeightsError::Corrupt { .. }), "{err:?}");
    // Bytes after the last tensor.
    let (_d, _, err) = broken(|b| b.extend_from_slice(&[0; 4]));
    assert!(matches!(err, WeightsError::Corrupt { .. }), "{err:?}");
    // A header length past any file.
    let (_d, _, err) = broken(|b| b[..8].copy_from_slice(&u64::MAX.to_le_bytes()));
    assert!(
        matches!(
            err,
            WeightsError::Corrupt { .. } | WeightsError::Truncated { .. }
        ),
        "{err:?}"
    );
    // A shape that doesn't match the offsets: [64] → [65] keeps the header's length.
    let (_d, _, err) = broken(|b| {
        let n = 8 + header_len();
        let header = String::from_utf8(b[8..n].to_vec()).unwrap();
        let edited = header.replacen("[64]", "[65]", 1);
        assert_ne!(header, edited);
        b[8..n].copy_from_slice(edited.as_bytes());
    });
    assert!(matches!(err, WeightsError::Corrupt { .. }), "{err:?}");
    // An empty file, and no file.
    let (_d, _, err) = broken(Vec::clear);
    assert!(
        matches!(err, WeightsError::Truncated { expected: 8, .. }),
        "{err:?}"
    );
    let err = Checkpoint::open("no/such/model.safetensors").unwrap_err();
    assert!(matches!(err, WeightsError::Io { .. }), "{err:?}");
    assert!(
        err.to_string().contains("no/such/model.safetensors"),
        "{err}"
    );
}
