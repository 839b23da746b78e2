//! How `fblayout step` and `fblayout plan` print a plan: one strategy's line of the summary, and
//! its times and bytes.

use fblayout_plan::select::Plan;

/// One strategy's line of the summary: its predicted step, its conversions and the peak of
/// its memory plan, `mark` after its name.
pub(crate) fn summary_line(plan: &Plan, peak: u64, mark: &str) -> String {
    format!(
        "  {:<10} {mark} {:>12} {:>5} conversions {:>10.2} MiB",
        plan.strategy().to_string(),
        seconds(plan.cost()),
        plan.conversions().len(),
        mib(peak)
    )
}

/// Seconds in milliseconds, or in microseconds below one.
pub(crate) fn seconds(s: f64) -> String {
    if s >= 1e-3 {
        format!("{:.3} ms", s * 1e3)
    } else {
        format!("{:.2} µs", s * 1e6)
    }
}

/// Bytes in MiB.
pub(crate) fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}
