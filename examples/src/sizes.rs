//! The sizes `fblayout step` and `fblayout plan` take on the command line, checked before
//! anything is built.

use fblayout_plan::graph::Sizes;
use fblayout_plan::models::ModelConfig;

/// Refuses sizes no graph or run can have, naming the flag.
pub(crate) fn check_sizes(config: ModelConfig, sizes: Sizes) -> Result<(), String> {
    for (flag, v) in [
        ("--batch", sizes.batch),
        ("--seq", sizes.seq),
        ("--layers", config.layers),
        ("--heads", config.heads),
        ("--hidden", config.hidden),
        ("--ffn", config.ffn),
        ("--vocab", config.vocab),
        ("--max-positions", config.max_positions),
    ] {
        if v == 0 {
            return Err(format!("{flag} must be at least 1"));
        }
    }
    if !config.hidden.is_multiple_of(config.heads) {
        return Err(format!(
            "--hidden {} is not a multiple of --heads {}",
            config.hidden, config.heads
        ));
    }
    if sizes.seq > config.max_positions {
        return Err(format!(
            "--seq {} is longer than the position table (--max-positions {})",
            sizes.seq, config.max_positions
        ));
    }
    Ok(())
}
