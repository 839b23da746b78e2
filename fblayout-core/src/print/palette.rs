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
    use super::super::svg::INK;
    use super::*;

    #[test]
    fn primary_hues_convert_exactly() {
        assert_eq!(hsl_to_rgb(0.0, 1.0, 0.5), (255, 0, 0));
        assert_eq!(hsl_to_rgb(120.0, 1.0, 0.5), (0, 255, 0));
        assert_eq!(hsl_to_rgb(240.0, 1.0, 0.5), (0, 0, 255));
        assert_eq!(hsl_to_rgb(77.0, 0.0, 1.0), (255, 255, 255));
    }

    /// The red, green and blue of `#rrggbb`, each 0 to 1.
    fn channels(colour: &str) -> [f64; 3] {
        assert!(colour.len() == 7 && colour.starts_with('#'), "{colour}");
        let channel = |i: usize| u8::from_str_radix(&colour[i..i + 2], 16).unwrap();
        [1, 3, 5].map(|i| f64::from(channel(i)) / 255.0)
    }

    /// Hue (degrees), saturation and lightness of `#rrggbb`, by the usual RGB to HSL rule.
    fn hsl(colour: &str) -> (f64, f64, f64) {
        let [r, g, b] = channels(colour);
        let (max, min) = (r.max(g).max(b), r.min(g).min(b));
        let (chroma, lightness) = (max - min, (max + min) / 2.0);
        let saturation = chroma / (1.0 - (2.0 * lightness - 1.0).abs());
        let sector = if max == r {
            ((g - b) / chroma).rem_euclid(6.0)
        } else if max == g {
            (b - r) / chroma + 2.0
        } else {
            (r - g) / chroma + 4.0
        };
        (sector * 60.0, saturation, lightness)
    }

    /// The distance between two hues around the colour wheel.
    fn hue_distance(a: f64, b: f64) -> f64 {
        let d = (a - b).rem_euclid(360.0);
        d.min(360.0 - d)
    }

    /// WCAG 2 relative luminance of `#rrggbb`.
    fn luminance(colour: &str) -> f64 {
        let linear = |c: f64| {
            if c <= 0.040_45 {
                c / 12.92
            } else {
                ((c + 0.055) / 1.055).powf(2.4)
            }
        };
        let [r, g, b] = channels(colour).map(linear);
        0.2126 * r + 0.7152 * g + 0.0722 * b
    }

    #[test]
    fn tile_k_has_hue_k_times_the_golden_angle_at_one_saturation_and_lightness() {
        let (_, s0, l0) = hsl(&tile_colour(0));
        for k in 0..64u32 {
            let colour = tile_colour(u64::from(k));
            let (hue, saturation, lightness) = hsl(&colour);
            // 8-bit channels round the hue by about a degree at this saturation.
            let want = f64::from(k) * 137.5 % 360.0;
            assert!(
                hue_distance(hue, want) < 1.5,
                "tile {k}: {colour} has hue {hue}, want {want}"
            );
            assert!(
                (saturation - s0).abs() < 0.02 && (lightness - l0).abs() < 0.01,
                "tile {k}: {colour} is not as pastel as tile 0"
            );
        }
        assert!(
            l0 > 0.7,
            "pastel: light enough for dark text, lightness {l0}"
        );
    }

    #[test]
    fn neighbours_land_far_apart_and_no_two_of_the_first_dozen_look_alike() {
        let hues: Vec<f64> = (0..12).map(|k| hsl(&tile_colour(k)).0).collect();
        for (k, pair) in hues.windows(2).enumerate() {
            assert!(
                hue_distance(pair[0], pair[1]) > 90.0,
                "tiles {k} and {}: {pair:?}",
                k + 1
            );
        }
        for (i, a) in hues.iter().enumerate() {
            for (j, b) in hues.iter().enumerate().skip(i + 1) {
                assert!(
                    hue_distance(*a, *b) > 15.0,
                    "tiles {i} and {j} are {a}° and {b}°"
                );
            }
        }
    }

    #[test]
    fn dark_text_reads_on_every_colour() {
        // WCAG 2 level AAA asks normal text for a contrast of at least 7:1.
        let ink = luminance(INK);
        for k in 0..256 {
            let colour = tile_colour(k);
            let contrast = (luminance(&colour) + 0.05) / (ink + 0.05);
            assert!(contrast >= 7.0, "tile {k}: {colour} gives {contrast:.2}:1");
        }
    }
}
