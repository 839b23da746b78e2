//! The cost model's factors as text, one `name values…` line each: the calibration's cache
//! holds them so ([`calibrate`](crate::calibrate)), and so does the analytic model's reference
//! device ([`Factors::reference`]).

use super::cost::{Class, ClassFactors, Factors, MatmulRates, short};
use super::kernels::{KernelFactors, KernelKind, OperandKind};
use crate::layouts::LayoutChoice;

/// The factors as the cache's text: one `name values…` line each, numbers in Rust's
/// shortest round-trip form.
pub fn encode(f: &Factors) -> String {
    let mut s = format!("bandwidth {}\ndispatch {}\n", f.bandwidth, f.dispatch);
    for (name, c) in [("access", f.access), ("reduce", f.reduce)] {
        s += &format!("{name} {} {} {}\n", c.tiled4, c.tiled8, c.strided);
    }
    for (a, b, r) in &f.matmul.rates {
        s += &format!("matmul {} {} {r}\n", short(*a), short(*b));
    }
    for (kind, operand, layout, m) in &f.kernels.multipliers {
        s += &format!("kernel {kind} {operand} {} {m}\n", layout.short());
    }
    s
}

/// The factors of the cache's text, checked; why not, when they don't parse or check.
pub fn decode(data: &[u8]) -> Result<Factors, String> {
    let text = std::str::from_utf8(data).map_err(|_| "the factors are not text".to_owned())?;
    let (mut bandwidth, mut dispatch, mut access, mut reduce) = (None, None, None, None);
    let mut rates = Vec::new();
    let mut multipliers = Vec::new();
    let kind = |s: &str| KernelKind::named(s).ok_or_else(|| format!("unknown kernel kind `{s}`"));
    let operand = |s: &str| OperandKind::named(s).ok_or_else(|| format!("unknown operand `{s}`"));
    let layout = |s: &str| {
        LayoutChoice::candidates(2)
            .into_iter()
            .find(|l| l.short() == s)
            .ok_or_else(|| format!("unknown layout `{s}`"))
    };
    let class = |s: &str| {
        Class::ALL
            .into_iter()
            .find(|c| short(*c) == s)
            .ok_or_else(|| format!("unknown class `{s}`"))
    };
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let num = |i: usize| -> Result<f64, String> {
            words
                .get(i)
                .and_then(|w| w.parse::<f64>().ok())
                .ok_or_else(|| format!("line `{line}` lacks a number"))
        };
        let factors = || -> Result<ClassFactors, String> {
            Ok(ClassFactors {
                tiled4: num(1)?,
                tiled8: num(2)?,
                strided: num(3)?,
            })
        };
        match words.first().copied() {
            Some("bandwidth") => bandwidth = Some(num(1)?),
            Some("dispatch") => dispatch = Some(num(1)?),
            Some("access") => access = Some(factors()?),
            Some("reduce") => reduce = Some(factors()?),
            Some("matmul") => rates.push((
                class(words.get(1).copied().unwrap_or(""))?,
                class(words.get(2).copied().unwrap_or(""))?,
                num(3)?,
            )),
            Some("kernel") => multipliers.push((
                kind(words.get(1).copied().unwrap_or(""))?,
                operand(words.get(2).copied().unwrap_or(""))?,
                layout(words.get(3).copied().unwrap_or(""))?,
                num(4)?,
            )),
            _ => return Err(format!("unexpected line `{line}`")),
        }
    }
    let missing = |what: &str| format!("the factors lack `{what}`");
    let factors = Factors {
        bandwidth: bandwidth.ok_or_else(|| missing("bandwidth"))?,
        dispatch: dispatch.ok_or_else(|| missing("dispatch"))?,
        access: access.ok_or_else(|| missing("access"))?,
        reduce: reduce.ok_or_else(|| missing("reduce"))?,
        matmul: MatmulRates { rates },
        kernels: KernelFactors { multipliers },
    };
    factors.check()?;
    Ok(factors)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::precision::Precision;

    /// The reference device's tables parse, check, and hold a multiplier for every kind of
    /// operation under every candidate layout (its activations', or its weights' where only
    /// those take other layouts, as AdamW's): a truncated or hand-edited table
    /// fails here, not when a plan is priced.
    #[test]
    fn the_reference_tables_are_whole() {
        let tables = crate::select::cost::REFERENCE_TABLES.map(|t| t.head_dim);
        for (precision, head_dim) in [Precision::F32, Precision::Mixed]
            .into_iter()
            .flat_map(|p| tables.map(|d| (p, d)))
        {
            let f = Factors::reference_at(precision, head_dim).expect("a table");
            assert_eq!(decode(encode(&f).as_bytes()), Ok(f.clone()));
            for kind in KernelKind::ALL {
                for layout in LayoutChoice::candidates(2) {
                    let has = f
                        .kernels
                        .multipliers
                        .iter()
                        .any(|(k, _, l, _)| *k == kind && *l == layout);
                    assert!(
                        has,
                        "{precision:?}, heads of {head_dim}: no multiplier of {kind} under \
                         {layout:?}"
                    );
                }
            }
            assert_eq!(
                f.matmul.rates.len(),
                8,
                "{precision:?}, heads of {head_dim}: a rate per pair of classes"
            );
        }
    }
}
