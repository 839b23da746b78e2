//! Fine-tuning a Hugging Face model with fblayout: the data ([`data`]), the learning-rate
//! schedule ([`schedule`]), checkpoints ([`checkpoint`]) and the training loop ([`Trainer`]),
//! which the `fblayout finetune` command runs.
//!
//! ```no_run
//! use fblayout_train::{Task, Trainer};
//!
//! let summary = Trainer::builder("models/gpt2", "data/train.txt", Task::Lm)
//!     .steps(100)
//!     .seq(32)
//!     .out("runs/gpt2")
//!     .build()?
//!     .run(|_event| {})?;
//! println!("final evaluation loss {:?}", summary.final_eval);
//! # Ok::<(), fblayout_train::TrainError>(())
//! ```

pub mod checkpoint;
pub mod data;
pub mod log;
pub mod schedule;
mod trainer;

pub use schedule::{Decay, Schedule};
pub use trainer::{
    CHECKPOINT_FILE, EXPORT_ADAPTER, EXPORT_DIR, EXPORT_MODEL, EvalResult, Event, Fusing, LOG_FILE,
    Summary, Task, TrainError, Trainer, TrainerBuilder,
};
