//! Operands: the tensors a kernel reads and writes, each through a view.

use std::fmt::Write as _;

use super::error::KernelError;
use super::source::PARAMS;
use super::wgsl_term;
use crate::emit::tokens::view_extent;
use crate::emit::wgsl::WgslWriter;
use crate::expr::{IndexFn, ValidIndexFn};
use crate::ident::ident_problem;
use crate::layout::{ElemType, TensorLayout, View};

/// The width of a wide access: `x_load4` reads four neighbours as one `vec4`.
pub const VECTOR_WIDTH: u32 = 4;

/// Whether a kernel writes an operand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    /// Bound `var<storage, read>`; the shader gets `load`s only.
    Read,
    /// Bound `var<storage, read_write>`; the shader gets `load`s and `store`s.
    ReadWrite,
}

/// A tensor a kernel touches: a role, the view it is read through and the access.
///
/// The role names everything the shader declares for the operand (see the module docs of
/// [`kernel`](super)); the view says how coordinates map to the tensor's buffer.
#[derive(Debug, Clone)]
pub struct Operand {
    role: String,
    view: View,
    access: Access,
    index: ValidIndexFn,
    vector: Option<usize>,
}

impl Operand {
    /// An operand the kernel reads.
    pub fn read(role: &str, view: &View) -> Result<Self, KernelError> {
        Self::new(role, view, Access::Read)
    }

    /// An operand the kernel writes (and may read).
    pub fn write(role: &str, view: &View) -> Result<Self, KernelError> {
        Self::new(role, view, Access::ReadWrite)
    }

    /// An operand with role `role`, read through `view`.
    pub fn new(role: &str, view: &View, access: Access) -> Result<Self, KernelError> {
        let bad = |name: &str, what, why| KernelError::BadOperand {
            role: role.to_owned(),
            name: name.to_owned(),
            what,
            why,
        };
        if let Some(why) = ident_problem(role) {
            return Err(bad(role, "an operand", why));
        }
        if role == PARAMS {
            return Err(bad(
                role,
                "an operand",
                "the parameter block is called `params`",
            ));
        }
        if let Some(axis) = view.axes().iter().find(|a| a.name == PARAMS) {
            return Err(bad(
                &axis.name,
                "an axis of a kernel operand",
                "it would hide the parameter block `params` inside the operand's functions",
            ));
        }
        let mut f: IndexFn = (**view.simplified_fn()).clone();
        f.name = role.to_owned();
        let index = f.validate().map_err(|_| {
            bad(
                role,
                "an operand",
                "the view's functions can't be named after it",
            )
        })?;
        Ok(Self {
            role: role.to_owned(),
            view: view.clone(),
            access,
            index,
            vector: None,
        })
    }

    /// Asks for wide accesses (`load4`/`store4`) along view axis `axis`. They are granted when
    /// [`contiguous_run`](ValidIndexFn::contiguous_run) proves that aligned runs of
    /// [`VECTOR_WIDTH`] coordinates along it are contiguous and aligned in memory, for every
    /// value of the run-time extents; otherwise the operand stays scalar and
    /// [`vector_axis`](Self::vector_axis) says so. A kernel asks, then writes its body for
    /// what it got.
    pub fn vectorized(mut self, axis: usize) -> Self {
        self.vector = self
            .index
            .contiguous_run(axis, u64::from(VECTOR_WIDTH))
            .then_some(axis);
        self
    }

    /// The axis along which `load4`/`store4` exist, if any.
    pub fn vector_axis(&self) -> Option<usize> {
        self.vector
    }

    /// The operand's role.
    pub fn role(&self) -> &str {
        &self.role
    }

    /// The view it is read through.
    pub fn view(&self) -> &View {
        &self.view
    }

    /// Read, or read and written.
    pub fn access(&self) -> Access {
        self.access
    }

    /// The element type stored in its buffer.
    pub fn elem(&self) -> ElemType {
        self.view.layout().elem()
    }

    /// The name of its extents struct in the shader, when its layout has run-time axes.
    pub(crate) fn extents_type(&self) -> Option<String> {
        (self.view.layout().dynamic_axes().count() > 0)
            .then(|| crate::typed::extents_struct_name(&self.role))
    }

    /// The WGSL type kernels compute with: `f32` for float storage, the integer type itself
    /// otherwise.
    pub(crate) fn value_type(&self) -> &'static str {
        match self.elem() {
            ElemType::F16 | ElemType::F32 => "f32",
            other => other.name(),
        }
    }

    /// The declarations of the operand at `@binding(binding)` (see the module docs).
    pub(crate) fn wgsl(&self, binding: u32) -> String {
        let role = &self.role;
        let layout: &TensorLayout = self.view.layout();
        let elem = self.elem().name();
        let value = self.value_type();
        let vector = self.vector.is_some();
        let stored = if vector {
            format!("vec4<{elem}>")
        } else {
            elem.to_owned()
        };
        let access = match self.access {
            Access::Read => "read",
            Access::ReadWrite => "read_write",
        };
        let axes: Vec<&str> = self.view.axes().iter().map(|a| a.name.as_str()).collect();
        let signature = axes
            .iter()
            .map(|a| format!("{a}: u32"))
            .collect::<Vec<_>>()
            .join(", ");
        let extent_arg = |param: &str| format!("{PARAMS}.{role}.{param}");
        let mut args: Vec<String> = axes.iter().map(|a| (*a).to_owned()).collect();
        args.extend(
            layout
                .dynamic_axes()
                .map(|a| extent_arg(&TensorLayout::extent_param(&a.name))),
        );
        let args = args.join(", ");
        let coords = axes.join(", ");

        let mut s = String::new();
        let shape: Vec<String> = self
            .view
            .axes()
            .iter()
            .map(|a| format!("{} ({})", a.name, a.extent))
            .collect();
        let _ = writeln!(
            s,
            "// Operand `{role}`: view `{}` of `{}` ({elem}, {}), [{}]{}",
            self.view.name(),
            layout.name(),
            layout.order().name(),
            shape.join(", "),
            match self.vector {
                Some(axis) => format!(", {VECTOR_WIDTH}-wide along `{}`", axes[axis]),
                None => String::new(),
            }
        );
        let _ = writeln!(
            s,
            "@group(0) @binding({binding}) var<storage, {access}> {role}_data: array<{stored}>;"
        );
        let mut w = WgslWriter::new(String::new());
        // Writing into a String cannot fail.
        let _ = w.write(&self.index);
        s += &w.finish();
        let _ = writeln!(
            s,
            "fn {role}_at({signature}) -> u32 {{\n    return {role}_offset({args});\n}}"
        );
        let _ = writeln!(
            s,
            "fn {role}_in({signature}) -> bool {{\n    return {role}_in_bounds({args});\n}}"
        );
        for (d, axis) in self.view.axes().iter().enumerate() {
            let extent = wgsl_term::expression(&view_extent(&axis.extent), &extent_arg);
            let _ = writeln!(s, "fn {role}_dim{d}() -> u32 {{\n    return {extent};\n}}");
        }
        // Locals would risk clashing with axis names, so the offset is written twice where
        // it is needed twice; `{role}_at` is pure and the shader compiler computes it once.
        let at = format!("{role}_at({coords})");
        let element = if vector {
            format!("{role}_data[{at} >> 2u][{at} & 3u]")
        } else {
            format!("{role}_data[{at}]")
        };
        let stored_value = format!("{role}_value");
        let convert = |from: &str, to: &str, v: String| {
            if from == to { v } else { format!("{to}({v})") }
        };
        let _ = writeln!(
            s,
            "fn {role}_load({signature}) -> {value} {{\n    return {};\n}}",
            convert(elem, value, element.clone())
        );
        if vector {
            let _ = writeln!(
                s,
                "fn {role}_load4({signature}) -> vec4<{value}> {{\n    return {};\n}}",
                convert(
                    &format!("vec4<{elem}>"),
                    &format!("vec4<{value}>"),
                    format!("{role}_data[{at} >> 2u]")
                )
            );
        }
        if self.access == Access::ReadWrite {
            let _ = writeln!(
                s,
                "fn {role}_store({signature}, {stored_value}: {value}) {{\n    {element} = {};\n}}",
                convert(value, elem, stored_value.clone())
            );
            if vector {
                let _ = writeln!(
                    s,
                    "fn {role}_store4({signature}, {stored_value}: vec4<{value}>) {{\n    {role}_data[{at} >> 2u] = {};\n}}",
                    convert(
                        &format!("vec4<{value}>"),
                        &format!("vec4<{elem}>"),
                        stored_value.clone()
                    )
                );
            }
        }
        s
    }
}
