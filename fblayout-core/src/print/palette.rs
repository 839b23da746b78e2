//! Colours for tiles: deterministic, distinct neighbours, readable dark text.
//!
//! Tile `k` gets the hue `k · 137.5°` (the golden angle), so consecutive tiles land far apart
//! on the colour wheel and no two of the first dozen look alike, at a fixed pastel saturation
//! and lightness that keeps black text legible. The colour depends on the tile index alone,
//! which is what lets two pictures of the same buffer (a view and its transpose) agree.
//! Colours are written as `#rrggbb`, which every SVG renderer reads.

/// The golden angle in degrees.
const GOLDEN_ANGLE: f64 = 137.507_764_050_037_85;
/// Saturation of tile colours, 0 to 1.
const SATURATION: f64 = 0.62;
/// Lightness of tile colours, 0 to 1: light enough for dark text.
const LIGHTNESS: f64 = 0.80;

/// The fill colour of tile (or group) `index`, as `#rrggbb`.
pub(crate) fn tile_colour(index: u64) -> String {
    // The hue repeats with period 360 in `index · angle`; reduce first to keep precision.
    let hue = ((index % 100_000) as f64 * GOLDEN_ANGLE) % 360.0;
    let (r, g, b) = hsl_to_rgb(hue, SATURATION, LIGHTNESS);
    format!("#{r:02x}{g:02x}{b:02x}")
}

/// Converts HSL (hue in degrees, saturation and lightness in 0..=1) to 8-bit RGB.
fn hsl_to_rgb(hue: f64, saturation: f64, lightness: f64) -> (u8, u8, u8) {
    let chroma = (1.0 - (2.0 * lightness - 1.0).abs()) * saturation;
    let h = hue.rem_euclid(360.0) / 60.0;
    let x = chroma * (1.0 - (h % 2.0 - 1.0).abs());
    let (r, g, b) = match h as u32 {
        0 => (chroma, x, 0.0),
        1 => (x, chroma, 0.0),
        2 => (0.0, chroma, x),
        3 => (0.0, x, chroma),
        4 => (x, 0.0, chroma),
        _ => (chroma, 0.0, x),
    };
    let m = lightness - chroma / 2.0;
    let byte = |v: f64| ((v + m) * 255.0).round().clamp(0.0, 255.0) as u8;
    (byte(r), byte(g), byte(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primary_hues_convert_exactly() {
        assert_eq!(hsl_to_rgb(0.0, 1.0, 0.5), (255, 0, 0));
        assert_eq!(hsl_to_rgb(120.0, 1.0, 0.5), (0, 255, 0));
        assert_eq!(hsl_to_rgb(240.0, 1.0, 0.5), (0, 0, 255));
        assert_eq!(hsl_to_rgb(77.0, 0.0, 1.0), (255, 255, 255));
    }

    #[test]
    fn colours_are_deterministic_and_neighbours_differ() {
        let first: Vec<String> = (0..16).map(tile_colour).collect();
        let again: Vec<String> = (0..16).map(tile_colour).collect();
        assert_eq!(first, again);
        for pair in first.windows(2) {
            assert_ne!(pair[0], pair[1]);
        }
        let mut distinct = first.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), first.len(), "{first:?}");
    }

    #[test]
    fn colours_are_light_enough_for_dark_text() {
        for k in 0..64 {
            let c = tile_colour(k);
            assert_eq!(c.len(), 7);
            let channel =
                |i: usize| f64::from(u8::from_str_radix(&c[i..i + 2], 16).unwrap()) / 255.0;
            // Rec. 709 luma; black text needs a light background.
            let luma = 0.2126 * channel(1) + 0.7152 * channel(3) + 0.0722 * channel(5);
            assert!(luma > 0.6, "tile {k}: {c} has luma {luma}");
        }
    }
}
