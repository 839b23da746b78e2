//! Exports reopened: a full model's `model.safetensors` holds every tensor of the source under
//! its name, shape and orientation, and the source's `config.json` and `tokenizer.json`; merged LoRA weights equal
//! peft's `merge_and_unload` (the fixture's `merged.*`); an adapter export has the names,
//! shapes, values and settings of peft's `save_pretrained` (the fixture's `lora_adapter/`).
//!
//! With `FBLAYOUT_EXPORT_DIR` set, the exports are written under it (`<arch>/full`,
//! `<arch>/merged`, `<arch>/adapter`) and kept, for `python/check_export.py` to load with
//! transformers and peft.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use fblayout_hf::weights::Checkpoint;
use fblayout_hf::{ModelDir, export, lora};
use fblayout_plan::graph::Graph;
use fblayout_plan::lora::Lora;

use crate::common::{fixture_json, hf, model_dir, read_all};

/// Where `arch`'s export `what` goes: under `FBLAYOUT_EXPORT_DIR`, else under `tmp`.
fn out_dir(tmp: &Path, arch: &str, what: &str) -> PathBuf {
    match std::env::var_os("FBLAYOUT_EXPORT_DIR") {
        Some(dir) => PathBuf::from(dir).join(arch).join(what),
        None => tmp.join(arch).join(what),
    }
}

/// The fixture model of `arch` with its LoRA adapter, and every weight's values.
fn with_lora(arch: &str) -> (ModelDir, Graph, Lora, Vec<(String, Vec<f64>)>) {
    let model = ModelDir::open(model_dir(arch)).unwrap();
    let adapter = hf(arch).join("lora_adapter");
    let config = lora::read_config(&adapter).unwrap();
    let (graph, adapters) = lora::build(&model, &config).unwrap();
    let mut values = fblayout_hf::graph::parameters(&model, &graph).unwrap();
    values.extend(lora::read_adapter(&adapter, &graph, &adapters).unwrap());
    (model, graph, adapters, values)
}

/// Every tensor of a checkpoint: name → (shape, values).
fn tensors(checkpoint: &Checkpoint) -> BTreeMap<String, (Vec<usize>, Vec<f32>)> {
    checkpoint
        .tensors()
        .map(|info| {
            let values = checkpoint.read_f32(&info.name).unwrap();
            (info.name.clone(), (info.shape.clone(), values))
        })
        .collect()
}

#[test]
fn a_full_export_reopens_with_every_tensor_and_the_config_of_the_source() {
    let tmp = tempfile::tempdir().unwrap();
    for arch in ["gpt2", "llama"] {
        let model = ModelDir::open(model_dir(arch)).unwrap();
        let graph = fblayout_hf::graph::build(&model).unwrap();
        let values = fblayout_hf::graph::parameters(&model, &graph).unwrap();
        let out = out_dir(tmp.path(), arch, "full");
        export::model(&model, &graph, &values, None, &out).unwrap();
        let back = ModelDir::open(&out).unwrap();
        // f32 → f64 → f32 is exact: every tensor comes back bit for bit, under its name.
        assert_eq!(
            tensors(back.checkpoint()),
            tensors(model.checkpoint()),
            "{arch}"
        );
        for file in ["config.json", "tokenizer.json"] {
            let bytes = |d: &Path| std::fs::read(d.join(file)).unwrap();
            assert_eq!(bytes(&out), bytes(&model_dir(arch)), "{arch}: {file}");
        }
        // No temporary file is left behind.
        let names: Vec<_> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(
            names.iter().all(|n| !n.ends_with(".tmp")),
            "{arch}: {names:?}"
        );
    }
}

#[test]
fn a_merged_lora_export_holds_peft_s_merged_weights() {
    let tmp = tempfile::tempdir().unwrap();
    for arch in ["gpt2", "llama"] {
        let (model, graph, adapters, values) = with_lora(arch);
        let out = out_dir(tmp.path(), arch, "merged");
        export::model(&model, &graph, &values, Some(&adapters), &out).unwrap();
        let back = tensors(ModelDir::open(&out).unwrap().checkpoint());
        let source = tensors(model.checkpoint());
        let fixture = read_all(&hf(arch).join("lora.safetensors"));
        let merged: Vec<String> = fixture_json(&hf(arch))["lora"]["merged_weights"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_str().unwrap().to_owned())
            .collect();
        assert_eq!(merged.len(), adapters.adapters.len(), "{arch}");
        assert_eq!(
            back.keys().collect::<Vec<_>>(),
            source.keys().collect::<Vec<_>>()
        );
        for (name, (shape, got)) in &back {
            assert_eq!(shape, &source[name].0, "{arch}: `{name}`");
            if merged.contains(name) {
                // peft merges in f32 (W + s·B·A, transposed for Conv1D); fblayout in f64,
                // rounded once: they agree to f32 round-off of weights below 1.
                let (_, want_shape, bytes) = &fixture[&format!("merged.{name}")];
                assert_eq!(want_shape, shape, "{arch}: `{name}`");
                let want: Vec<f32> = bytes
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
                    .collect();
                let worst = got
                    .iter()
                    .zip(&want)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0f32, f32::max);
                assert!(worst <= 1e-6, "{arch}: `{name}` merged {worst:e} apart");
                assert_ne!(got, &source[name].1, "{arch}: `{name}` is merged");
            } else {
                assert_eq!(got, &source[name].1, "{arch}: `{name}` is unchanged");
            }
        }
    }
}

#[test]
fn a_lora_adapter_export_is_what_peft_saves() {
    let tmp = tempfile::tempdir().unwrap();
    for arch in ["gpt2", "llama"] {
        let (model, graph, adapters, values) = with_lora(arch);
        let out = out_dir(tmp.path(), arch, "adapter");
        export::adapter(&model, &graph, &values, &adapters, None, &out).unwrap();
        let peft = hf(arch).join("lora_adapter");
        let open = |d: &Path| Checkpoint::open(d.join("adapter_model.safetensors")).unwrap();
        // The initial adapter, read and written back: names, shapes and values as peft's.
        assert_eq!(tensors(&open(&out)), tensors(&open(&peft)), "{arch}");
        let json = |d: &Path| -> serde_json::Value {
            serde_json::from_slice(&std::fs::read(d.join("adapter_config.json")).unwrap()).unwrap()
        };
        let (ours, theirs) = (json(&out), json(&peft));
        let (ours, theirs) = (ours.as_object().unwrap(), theirs.as_object().unwrap());
        assert_eq!(
            ours.keys().collect::<Vec<_>>(),
            theirs.keys().collect::<Vec<_>>(),
            "{arch}"
        );
        for (key, want) in theirs {
            let got = &ours[key];
            match (got.as_f64(), want.as_f64()) {
                // `lora_alpha` 8 and 8.0 are one number.
                (Some(a), Some(b)) => assert_eq!(a, b, "{arch}: `{key}`"),
                _ => assert_eq!(got, want, "{arch}: `{key}`"),
            }
        }
        assert_eq!(lora::read_config(&out).unwrap(), adapters.config, "{arch}");
    }
}

#[test]
fn a_seq_cls_adapter_with_modules_to_save_round_trips_exactly_in_peft_s_layout() {
    // peft's trained SEQ_CLS adapter (python/make_seq_cls_fixture.py): LoRA's matrices and the
    // classifier trained in full, read and written back as peft's `save_pretrained` wrote it.
    let tmp = tempfile::tempdir().unwrap();
    let model = ModelDir::open(model_dir("bert")).unwrap();
    let peft = hf("bert").join("seq_cls/adapter");
    let config = lora::read_config(&peft).unwrap();
    let (graph, adapters) = lora::build(&model, &config).unwrap();
    let values = lora::weights(&model, &peft, &graph, &adapters).unwrap();
    let out = out_dir(tmp.path(), "bert", "seq_cls_adapter");
    export::adapter(&model, &graph, &values, &adapters, None, &out).unwrap();
    let open = |d: &Path| Checkpoint::open(d.join("adapter_model.safetensors")).unwrap();
    let written = tensors(&open(&out));
    assert!(written.contains_key("base_model.model.classifier.weight"));
    assert_eq!(written, tensors(&open(&peft)));
    let json = |d: &Path| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(d.join("adapter_config.json")).unwrap()).unwrap()
    };
    let (ours, theirs) = (json(&out), json(&peft));
    for (key, want) in theirs.as_object().unwrap() {
        let got = &ours[key];
        match (got.as_f64(), want.as_f64()) {
            (Some(a), Some(b)) => assert_eq!(a, b, "`{key}`"),
            _ => assert_eq!(got, want, "`{key}`"),
        }
    }
    assert_eq!(ours["task_type"], "SEQ_CLS");
    // Read back: the same settings and every trained value, bit for bit.
    let again = lora::read_config(&out).unwrap();
    assert_eq!(again, config);
    let (graph2, adapters2) = lora::build(&model, &again).unwrap();
    assert_eq!(adapters2, adapters);
    let read = lora::read_trained(&model, &out, &graph2, &adapters2).unwrap();
    let first = lora::read_trained(&model, &peft, &graph, &adapters).unwrap();
    assert_eq!(read, first);
    assert_eq!(read.len(), graph.params().len());
}
