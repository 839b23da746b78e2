//! Rotary position embeddings as a Llama-family `config.json` describes them.
//!
//! The base frequency and the scaling are written three ways, and fblayout reads all of
//! them:
//!
//! - transformers 4: a top-level `rope_theta` and `rope_scaling: {"type" | "rope_type",
//!   "factor"}` (or `null`);
//! - transformers 5: `rope_parameters: {"rope_theta", "rope_type", "factor"}`;
//! - both at once (a file written for both versions): they must then agree.

use super::fields::Fields;

/// How a model's RoPE angles are computed: `pos' · theta^(-2i/head_dim)` with `pos' = pos` or
/// `pos / factor`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rope {
    /// The base (`rope_theta`, default 10000).
    pub theta: f64,
    /// How positions are scaled.
    pub scaling: RopeScaling,
}

/// A RoPE scaling fblayout can compute.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RopeScaling {
    /// `rope_type: "default"`, or no scaling given: positions as they are.
    None,
    /// `rope_type: "linear"`: positions divided by `factor` (position interpolation).
    Linear {
        /// The divisor, > 0.
        factor: f64,
    },
}

const TYPES: &[&str] = &["default", "linear"];
const DEFAULT_THETA: f64 = 10_000.0;

/// What one of `rope_parameters` / `rope_scaling` says.
struct Written {
    theta: Option<f64>,
    scaling: Option<RopeScaling>,
}

pub(super) fn parse(f: &mut Fields<'_>) -> Rope {
    let top_theta = f.opt_f64("rope_theta");
    let params = f.opt_object("rope_parameters", read).flatten();
    let legacy = f.opt_object("rope_scaling", read).flatten();

    let nested_theta = params.as_ref().and_then(|p| p.theta);
    let theta = match (top_theta, nested_theta) {
        (Some(top), Some(nested)) if top != nested => {
            f.invalid(
                "rope_theta",
                format!("is {top} but rope_parameters.rope_theta is {nested}"),
            );
            top
        }
        (top, nested) => top.or(nested).unwrap_or(DEFAULT_THETA),
    };
    if !(theta > 0.0 && theta.is_finite()) {
        f.invalid(
            "rope_theta",
            format!("must be a positive number, is {theta}"),
        );
    }

    let new = params.and_then(|p| p.scaling);
    let old = legacy.and_then(|p| p.scaling);
    let scaling = match (new, old) {
        (Some(new), Some(old)) if new != old => {
            f.invalid(
                "rope_scaling",
                format!("says {old:?} but rope_parameters says {new:?}"),
            );
            new
        }
        (new, old) => new.or(old).unwrap_or(RopeScaling::None),
    };
    Rope { theta, scaling }
}

/// Reads one `rope_parameters` / `rope_scaling` object; `None` after a problem.
fn read(p: &mut Fields<'_>) -> Option<Written> {
    let before = p.problems.len();
    let written = read_fields(p);
    written.filter(|_| p.problems.len() == before)
}

fn read_fields(p: &mut Fields<'_>) -> Option<Written> {
    let theta = p.opt_f64("rope_theta");
    let rope_type = p.opt_string("rope_type");
    let legacy_type = p.opt_string("type");
    let (key, kind) = match (rope_type, legacy_type) {
        (Some(a), Some(b)) if a != b => {
            p.invalid("rope_type", format!("is \"{a}\" but `type` is \"{b}\""));
            return None;
        }
        (Some(a), _) => ("rope_type", a),
        (None, Some(b)) => ("type", b),
        (None, None) => {
            return Some(Written {
                theta,
                scaling: None,
            });
        }
    };
    let scaling = match kind.as_str() {
        "default" => RopeScaling::None,
        "linear" => {
            let factor = p.f64("factor");
            if p.has("factor") && !(factor > 0.0 && factor.is_finite()) {
                p.invalid("factor", format!("must be a positive number, is {factor}"));
            }
            RopeScaling::Linear { factor }
        }
        _ => {
            p.unsupported(key, &serde_json::Value::String(kind), TYPES);
            return None;
        }
    };
    Some(Written {
        theta,
        scaling: Some(scaling),
    })
}
