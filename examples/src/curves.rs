//! The loss curves of a fine-tuning run as a standalone SVG: the training loss of every step
//! (grey) and the held-out loss of every evaluation (blue dots joined), over the steps, on one
//! linear axis of loss with its range marked; for a classifier, also the held-out accuracy of
//! every evaluation (green dots joined) on an axis of its own at the right, 0 to 100 %.

use std::fmt::Write;

use fblayout_train::log::Record;

const WIDTH: f64 = 640.0;
const HEIGHT: f64 = 360.0;
/// The margin around the plot: room for the axis labels.
const MARGIN: f64 = 48.0;

/// The SVG document of `records` (see the module docs).
pub(crate) fn svg(records: &[Record]) -> String {
    let points = |of: fn(&Record) -> Option<(u32, f64)>| -> Vec<(f64, f64)> {
        (records.iter().filter_map(of))
            .map(|(step, loss)| (f64::from(step), loss))
            .collect()
    };
    let (train, eval) = (points(Record::training_loss), points(Record::eval_loss));
    let accuracy: Vec<(f64, f64)> = records
        .iter()
        .filter_map(|r| match *r {
            Record::Eval {
                step,
                accuracy: Some(a),
                ..
            } => Some((f64::from(step), a)),
            _ => None,
        })
        .collect();
    let all = || train.iter().chain(&eval).filter(|p| p.1.is_finite());
    let last = all().map(|p| p.0).fold(1.0, f64::max);
    let lo = all().map(|p| p.1).fold(f64::INFINITY, f64::min);
    let hi = all().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max);
    let (lo, hi) = if lo.is_finite() && hi > lo {
        (lo, hi)
    } else {
        (lo.min(0.0), lo.max(0.0) + 1.0)
    };
    let x =
        |step: f64| MARGIN + (step - 1.0).max(0.0) / (last - 1.0).max(1.0) * (WIDTH - 2.0 * MARGIN);
    let y = |loss: f64| HEIGHT - MARGIN - (loss - lo) / (hi - lo) * (HEIGHT - 2.0 * MARGIN);
    let points = |p: &[(f64, f64)]| {
        p.iter()
            .filter(|p| p.1.is_finite())
            .map(|&(s, l)| format!("{:.1},{:.1}", x(s), y(l)))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let (x0, x1, y0, y1) = (MARGIN, WIDTH - MARGIN, MARGIN, HEIGHT - MARGIN);
    let _ = writeln!(
        s,
        r#"<path d="M{x0},{y0} V{y1} H{x1}" fill="none" stroke="black"/>"#
    );
    let _ = writeln!(
        s,
        r#"<text x="{x0}" y="{}" text-anchor="middle">1</text><text x="{x1}" y="{}" text-anchor="middle">{last}</text><text x="{}" y="{}" text-anchor="middle">step</text>"#,
        y1 + 14.0,
        y1 + 14.0,
        WIDTH / 2.0,
        y1 + 30.0
    );
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{y0}" text-anchor="end">{hi:.3}</text><text x="{}" y="{y1}" text-anchor="end">{lo:.3}</text><text x="{}" y="{}" text-anchor="middle" transform="rotate(-90 {} {})">loss</text>"#,
        x0 - 4.0,
        x0 - 4.0,
        14.0,
        HEIGHT / 2.0,
        14.0,
        HEIGHT / 2.0
    );
    let _ = writeln!(
        s,
        r##"<polyline points="{}" fill="none" stroke="#888" stroke-width="1"/>"##,
        points(&train)
    );
    let _ = writeln!(
        s,
        r##"<polyline points="{}" fill="none" stroke="#1f6fd1" stroke-width="2"/>"##,
        points(&eval)
    );
    for &(st, l) in eval.iter().filter(|p| p.1.is_finite()) {
        let _ = writeln!(
            s,
            r##"<circle cx="{:.1}" cy="{:.1}" r="3" fill="#1f6fd1"/>"##,
            x(st),
            y(l)
        );
    }
    if !accuracy.is_empty() {
        // The accuracy's axis: 0 at the bottom, 1 at the top.
        let ya = |a: f64| y1 - a.clamp(0.0, 1.0) * (y1 - y0);
        let line: Vec<String> = accuracy
            .iter()
            .map(|&(st, a)| format!("{:.1},{:.1}", x(st), ya(a)))
            .collect();
        let _ = writeln!(
            s,
            r##"<path d="M{x1},{y0} V{y1}" fill="none" stroke="#2a9d4b"/><text x="{}" y="{y0}" fill="#2a9d4b">100 %</text><text x="{}" y="{y1}" fill="#2a9d4b">0 %</text>"##,
            x1 + 4.0,
            x1 + 4.0
        );
        let _ = writeln!(
            s,
            r##"<polyline points="{}" fill="none" stroke="#2a9d4b" stroke-width="2"/>"##,
            line.join(" ")
        );
        for &(st, a) in &accuracy {
            let _ = writeln!(
                s,
                r##"<circle cx="{:.1}" cy="{:.1}" r="3" fill="#2a9d4b"/>"##,
                x(st),
                ya(a)
            );
        }
        let _ = writeln!(
            s,
            r##"<text x="{}" y="{}" fill="#2a9d4b">held-out accuracy</text>"##,
            x1 - 300.0,
            y0 - 16.0
        );
    }
    let _ = writeln!(
        s,
        r##"<text x="{}" y="{}" fill="#888">training loss</text><text x="{}" y="{}" fill="#1f6fd1">held-out loss</text>"##,
        x1 - 170.0,
        y0 - 16.0,
        x1 - 80.0,
        y0 - 16.0
    );
    s.push_str("</svg>\n");
    s
}
