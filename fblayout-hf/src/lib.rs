//! Loading Hugging Face models for fblayout: what a model directory holds, read into typed
//! values that a training run can be built from.
//!
//! A model on the Hugging Face Hub is a directory of files written by transformers'
//! `save_pretrained` and tokenizers' `save`; this crate reads the three that define a model:
//!
//! - [`config`]: `config.json` — the architecture (BERT, GPT-2, the Llama family) and its
//!   hyper-parameters, checked;
//! - [`weights`]: `model.safetensors`, or a sharded checkpoint's index and shards —
//!   memory-mapped, every tensor listed with its dtype and shape and readable as `f32`;
//! - [`names`]: which tensors each architecture's checkpoint holds (HF's names and shapes,
//!   given the config), and a check of a checkpoint against them;
//! - [`tokenizer`]: `tokenizer.json` — text to padded rows of ids, attention mask and token
//!   types;
//! - [`ModelDir`]: the three at once, from a directory;
//! - [`graph`]: the model's training graph (fblayout-plan) built from its config, and its
//!   parameters' values from its checkpoint.
//! - [`embed`]: sentence embeddings from an encoder's last hidden state — mean pooling over the
//!   real tokens and L2 normalisation, as sentence-transformers computes them.
//!
//! The loading modules say what the files hold, in Hugging Face's names and orientation;
//! [`graph`] maps them onto fblayout's training graph.
//! Every failure is a typed error that names the file and the field or tensor at fault; none
//! panics.
//!
//! ```
//! use fblayout_hf::ModelDir;
//! use fblayout_hf::config::ModelConfig;
//!
//! let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
//! let model = ModelDir::open(root.join("tests/fixtures/hf/llama/model"))?;
//! let ModelConfig::Llama(llama) = model.config() else { panic!("not a Llama") };
//! assert_eq!((llama.num_attention_heads, llama.num_key_value_heads), (4, 2));
//!
//! let names = model.check_names()?; // every tensor present, with the shape the config implies
//! let q = model.checkpoint().read_f32(names.actual("model.layers.0.self_attn.q_proj.weight").unwrap())?;
//! assert_eq!(q.len(), 64 * 64);
//!
//! let batch = model.tokenizer().encode_batch(["Alice was", "Oh dear!"])?;
//! assert_eq!(batch.input_ids[0][0], 0); // <s>
//! assert_eq!(batch.attention_mask[1].iter().sum::<u32>() as usize, batch.lengths[1]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod config;
pub mod embed;
pub mod export;
pub mod files;
pub mod graph;
pub mod lora;
mod model_dir;
pub mod names;
pub mod tokenizer;
pub mod weights;

pub use model_dir::{
    CONFIG_FILE, ModelDir, ModelDirError, TOKENIZER_FILE, WEIGHTS_FILE, WEIGHTS_INDEX_FILE,
};
