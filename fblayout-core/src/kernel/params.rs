//! The parameter block: run-time extents and scalars, laid out as naga lays them out.
//!
//! A kernel's uniform `params` holds one extents struct per operand with run-time axes, then the
//! kernel's scalars. Where each field sits is WGSL's business (a nested struct in a uniform is
//! 16-byte aligned), so [`ParamsLayout`] reads the offsets from naga's IR of the validated
//! module instead of computing them again; [`ParamsLayout::pack`] writes values there.

use super::error::KernelError;

/// The type of a scalar parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scalar {
    /// `u32`.
    U32,
    /// `i32`.
    I32,
    /// `f32`.
    F32,
}

impl Scalar {
    /// The WGSL spelling.
    pub fn wgsl(self) -> &'static str {
        match self {
            Self::U32 => "u32",
            Self::I32 => "i32",
            Self::F32 => "f32",
        }
    }
}

/// A value for one field of the parameter block.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ParamValue {
    /// A `u32` (run-time extents are `u32`s).
    U32(u32),
    /// An `i32`.
    I32(i32),
    /// An `f32`.
    F32(f32),
}

impl ParamValue {
    fn scalar(self) -> Scalar {
        match self {
            Self::U32(_) => Scalar::U32,
            Self::I32(_) => Scalar::I32,
            Self::F32(_) => Scalar::F32,
        }
    }

    fn bytes(self) -> [u8; 4] {
        match self {
            Self::U32(v) => v.to_le_bytes(),
            Self::I32(v) => v.to_le_bytes(),
            Self::F32(v) => v.to_le_bytes(),
        }
    }
}

/// One field of the parameter block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamField {
    /// `role.<axis>_len` for a run-time extent of operand `role`, or the scalar's name.
    pub name: String,
    /// Its byte offset in the block.
    pub offset: u32,
    /// Its type.
    pub scalar: Scalar,
}

/// Where every field of a kernel's parameter block is, as naga laid it out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamsLayout {
    kernel: String,
    binding: u32,
    size: u32,
    fields: Vec<ParamField>,
}

impl ParamsLayout {
    /// Reads the layout of the uniform named `name` from a validated module.
    pub(crate) fn from_module(
        kernel: &str,
        module: &naga::Module,
        name: &str,
    ) -> Option<ParamsLayout> {
        let (_, var) = module
            .global_variables
            .iter()
            .find(|(_, v)| v.name.as_deref() == Some(name))?;
        let binding = var.binding.as_ref()?.binding;
        let mut fields = Vec::new();
        let size = collect(module, var.ty, "", 0, &mut fields)?;
        Some(ParamsLayout {
            kernel: kernel.to_owned(),
            binding,
            size,
            fields,
        })
    }

    /// The `@binding` of the block (in `@group(0)`).
    pub fn binding(&self) -> u32 {
        self.binding
    }

    /// The block's size in bytes, rounded up to 16 (a uniform binding's granularity).
    pub fn size(&self) -> u32 {
        self.size.div_ceil(16) * 16
    }

    /// Every field, in declaration order (nested structs flattened, `role.field`).
    pub fn fields(&self) -> &[ParamField] {
        &self.fields
    }

    /// The field called `name`.
    pub fn field(&self, name: &str) -> Option<&ParamField> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// The block's bytes with every field set from `values`. Each field must be given exactly
    /// once, with its type; padding is zero.
    pub fn pack(&self, values: &[(&str, ParamValue)]) -> Result<Vec<u8>, KernelError> {
        let problem = |field: &str, problem: String| KernelError::Params {
            kernel: self.kernel.clone(),
            field: field.to_owned(),
            problem,
        };
        let mut bytes = vec![0u8; self.size() as usize];
        for (i, (name, value)) in values.iter().enumerate() {
            if values[..i].iter().any(|(n, _)| n == name) {
                return Err(problem(name, "given twice".into()));
            }
            let field = self.field(name).ok_or_else(|| {
                let known: Vec<&str> = self.fields.iter().map(|f| f.name.as_str()).collect();
                problem(
                    name,
                    format!("the block has no such field (it has: {})", known.join(", ")),
                )
            })?;
            if field.scalar != value.scalar() {
                return Err(problem(
                    name,
                    format!(
                        "it is a {}, but a {} was given",
                        field.scalar.wgsl(),
                        value.scalar().wgsl()
                    ),
                ));
            }
            let at = field.offset as usize;
            bytes[at..at + 4].copy_from_slice(&value.bytes());
        }
        if let Some(missing) = self
            .fields
            .iter()
            .find(|f| !values.iter().any(|(n, _)| *n == f.name))
        {
            return Err(problem(&missing.name, "no value was given".into()));
        }
        Ok(bytes)
    }
}

/// Flattens the struct `ty` at byte `base` into `fields`; returns its size.
fn collect(
    module: &naga::Module,
    ty: naga::Handle<naga::Type>,
    prefix: &str,
    base: u32,
    fields: &mut Vec<ParamField>,
) -> Option<u32> {
    match &module.types[ty].inner {
        naga::TypeInner::Struct { members, span } => {
            for m in members {
                let name = m.name.clone()?;
                let name = if prefix.is_empty() {
                    name
                } else {
                    format!("{prefix}.{name}")
                };
                if matches!(module.types[m.ty].inner, naga::TypeInner::Struct { .. }) {
                    collect(module, m.ty, &name, base + m.offset, fields)?;
                } else {
                    let scalar = match module.types[m.ty].inner {
                        naga::TypeInner::Scalar(s) => match (s.kind, s.width) {
                            (naga::ScalarKind::Uint, 4) => Scalar::U32,
                            (naga::ScalarKind::Sint, 4) => Scalar::I32,
                            (naga::ScalarKind::Float, 4) => Scalar::F32,
                            _ => return None,
                        },
                        _ => return None,
                    };
                    fields.push(ParamField {
                        name,
                        offset: base + m.offset,
                        scalar,
                    });
                }
            }
            Some(*span)
        }
        _ => None,
    }
}
