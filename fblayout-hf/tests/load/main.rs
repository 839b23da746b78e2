//! fblayout-hf against the committed fixtures (`tests/fixtures/hf/`, `tests/fixtures/minilm/`)
//! and against files made broken on purpose. One test binary, one module per part of the
//! crate.

mod common;
mod config;
mod embed;
mod evaluate;
mod export;
mod lora;
mod minilm;
mod model_dir;
mod names;
mod parity;
mod sharded;
mod tokenizer;
mod weights;
