//! WGSL accessors that move one or four elements along an axis, whatever the operand's
//! layout allows.

use std::fmt::Write as _;

use fblayout_core::kernel::Operand;

/// The WGSL type of `width` values: `vec4<f32>` or `f32`.
pub(crate) fn value_type(width: u32) -> &'static str {
    if width == 4 { "vec4<f32>" } else { "f32" }
}

/// The pieces of a WGSL accessor of `operand` moving `width` elements along `axis`: its
/// parameter list, the coordinates with `k` added along `axis`, the plain coordinates, the
/// extent along `axis`, and whether the operand has wide accesses there.
fn accessor_parts(
    operand: &Operand,
    axis: usize,
    width: u32,
) -> (String, String, String, String, bool) {
    let role = operand.role();
    let params: Vec<String> = (0..operand.view().axes().len())
        .map(|d| format!("at{d}"))
        .collect();
    let signature = params
        .iter()
        .map(|p| format!("{p}: u32"))
        .collect::<Vec<_>>()
        .join(", ");
    let mut shifted = params.clone();
    shifted[axis] = format!("at{axis} + k");
    let wide = width == 4 && operand.vector_axis() == Some(axis);
    (
        signature,
        shifted.join(", "),
        params.join(", "),
        format!("{role}_dim{axis}()"),
        wide,
    )
}

/// A WGSL reader of `width` elements along `axis` of `operand`: `<role>_get<width>(coords)`,
/// components past the axis's extent read as 0. It uses the operand's `load4` where it has one
/// along `axis` and the whole run lies inside, single elements otherwise. The other coordinates
/// must be inside the view.
pub(crate) fn getter(operand: &Operand, axis: usize, width: u32) -> String {
    let role = operand.role();
    let (signature, shifted, coords, dim, wide) = accessor_parts(operand, axis, width);
    if width == 1 {
        return format!(
            "fn {role}_get1({signature}) -> f32 {{\n    if (at{axis} < {dim}) {{\n        \
             return {role}_load({coords});\n    }}\n    return 0.0;\n}}\n"
        );
    }
    let mut s = format!("fn {role}_get4({signature}) -> vec4<f32> {{\n");
    if wide {
        let _ = writeln!(
            s,
            "    if (at{axis} + 3u < {dim}) {{\n        return {role}_load4({coords});\n    }}"
        );
    }
    let _ = writeln!(
        s,
        "    var v = vec4<f32>(0.0);\n    for (var k = 0u; k < 4u; k = k + 1u) {{\n        \
         if (at{axis} + k < {dim}) {{\n            v[k] = {role}_load({shifted});\n        }}\n    \
         }}\n    return v;\n}}"
    );
    s
}

/// The writer matching [`getter`]: `<role>_put<width>(coords, v)`, components past the axis's
/// extent not stored.
pub(crate) fn putter(operand: &Operand, axis: usize, width: u32) -> String {
    let role = operand.role();
    let (signature, shifted, coords, dim, wide) = accessor_parts(operand, axis, width);
    if width == 1 {
        return format!(
            "fn {role}_put1({signature}, v: f32) {{\n    if (at{axis} < {dim}) {{\n        \
             {role}_store({coords}, v);\n    }}\n}}\n"
        );
    }
    let mut s = format!("fn {role}_put4({signature}, v: vec4<f32>) {{\n");
    if wide {
        let _ = writeln!(
            s,
            "    if (at{axis} + 3u < {dim}) {{\n        {role}_store4({coords}, v);\n        \
             return;\n    }}"
        );
    }
    let _ = writeln!(
        s,
        "    for (var k = 0u; k < 4u; k = k + 1u) {{\n        if (at{axis} + k < {dim}) \
         {{\n            {role}_store({shifted}, v[k]);\n        }}\n    }}\n}}"
    );
    s
}

/// The WGSL sum of the components of a value of `width`.
pub(crate) fn components_sum(value: &str, width: u32) -> String {
    if width == 4 {
        format!("(({value}.x + {value}.y) + ({value}.z + {value}.w))")
    } else {
        value.to_owned()
    }
}
