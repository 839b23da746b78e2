//! A plan in words: every tensor's layout and why, the conversions, the totals.
//!
//! `Display` for [`Plan`] prints, after a header with the totals by pass:
//!
//! - one line per tensor: its name, shape, layout, then the predicted seconds of every
//!   operation touching it under each candidate (the chosen one marked `*`, the other
//!   tensors as planned, conversions where they pay) and the reason in one phrase — by how
//!   much the choice beats the next best, or what a better candidate would save. A tensor the
//!   backward reads again is marked `saved`. This is where to look to learn why a tensor is
//!   an R-Tile;
//! - one line per conversion: the `Convert` operation, what it converts from and to, its
//!   class (free, in-tile, global copy with its bytes), its cost, and the operation it feeds.

use std::fmt;

use fblayout_core::layout::Conversion;

use super::plan::Plan;
use crate::graph::Phase;
use crate::layouts::LayoutChoice;

/// Seconds in a readable unit.
pub(crate) fn time(seconds: f64) -> String {
    if seconds.abs() >= 1e-3 {
        format!("{:.3} ms", seconds * 1e3)
    } else {
        format!("{:.2} µs", seconds * 1e6)
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = &self.graph;
        let origin = &self.origin;
        write!(
            f,
            "{} plan, batch {} × sequence {} ({origin}): {} predicted",
            self.strategy,
            self.sizes.batch,
            self.sizes.seq,
            time(self.cost)
        )?;
        match (self.optimum, self.gap()) {
            (Some(o), Some(gap)) => {
                writeln!(f, "; exact optimum {} ({:+.2} %)", time(o), gap * 100.0)?
            }
            _ => writeln!(f)?,
        }
        let mut by_pass = [0.0; 3];
        for (node, cost) in g.nodes().iter().zip(&self.node_costs) {
            by_pass[match node.op.phase() {
                Phase::Forward => 0,
                Phase::Backward => 1,
                // The optimizer, and any pass after it.
                _ => 2,
            }] += cost;
        }
        let converting = self.inserted.iter().fold(0.0, |a, c| a + c.cost);
        writeln!(
            f,
            "  forward {}, backward {}, optimizer {}; of which {} conversions: {}",
            time(by_pass[0]),
            time(by_pass[1]),
            time(by_pass[2]),
            self.inserted.len(),
            time(converting)
        )?;
        let mut counts: Vec<(LayoutChoice, usize)> = Vec::new();
        for &l in &self.layouts[..self.planned] {
            match counts.iter_mut().find(|c| c.0 == l) {
                Some(c) => c.1 += 1,
                None => counts.push((l, 1)),
            }
        }
        counts.sort();
        let counts: Vec<String> = counts.iter().map(|(l, n)| format!("{l} {n}")).collect();
        writeln!(f, "  tensors by layout: {}", counts.join(", "))?;
        writeln!(
            f,
            "\ntensors: layout, then the seconds of the operations touching it under each \
             candidate (* = chosen)"
        )?;
        let saved = g.saved();
        for c in &self.candidates {
            let t = g.tensor(c.tensor);
            let shape: Vec<String> = t
                .axes
                .iter()
                .map(|a| format!("{}={}", a.name, a.dim))
                .collect();
            let chosen = self.layout(c.tensor);
            write!(f, "  {} [{}] {}", t.name, shape.join(", "), chosen)?;
            if saved.contains(&c.tensor) {
                f.write_str(" (saved)")?;
            }
            if c.costs.len() < 2 {
                writeln!(f, ": the only candidate")?;
                continue;
            }
            let list: Vec<String> = c
                .costs
                .iter()
                .map(|(l, s)| {
                    let mark = if *l == chosen { "*" } else { "" };
                    format!("{}{mark} {}", l.short(), time(*s))
                })
                .collect();
            let own = c.costs.iter().find(|x| x.0 == chosen).map_or(0.0, |x| x.1);
            let best = c
                .costs
                .iter()
                .filter(|x| x.0 != chosen)
                .min_by(|a, b| a.1.total_cmp(&b.1));
            let why = match best {
                Some((l, s)) if *s < own => format!("{l} would save {}", time(own - s)),
                Some((l, s)) if *s == own => format!("ties with {l}"),
                Some((l, s)) => format!("beats {l} by {}", time(s - own)),
                None => String::new(),
            };
            writeln!(f, ": {} — {why}", list.join(" | "))?;
        }
        if !self.inserted.is_empty() {
            writeln!(f, "\nconversions:")?;
        }
        for c in &self.inserted {
            let class = match c.class {
                Conversion::Free => "free".to_owned(),
                Conversion::InTile { block } => format!("in-tile, blocks of {block}"),
                Conversion::GlobalCopy { bytes } => format!("global copy of {bytes} bytes"),
            };
            writeln!(
                f,
                "  #{} {} {} → {} ({class}): {}, for #{} {}",
                c.node.index(),
                g.tensor(c.source).name,
                c.from,
                c.to,
                time(c.cost),
                c.consumer.index(),
                g.nodes()[c.consumer.index()].op
            )?;
        }
        Ok(())
    }
}
