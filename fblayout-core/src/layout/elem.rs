//! Element types.
//!
//! A tensor declares the scalar type of its elements. fblayout sizes buffers from it and
//! refuses, when a layout is built, the types that WGSL cannot store without extensions.

use std::fmt;
use std::str::FromStr;

/// The scalar type of a tensor's elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ElemType {
    /// 32-bit float (`f32`).
    F32,
    /// 16-bit float (`f16`; WGSL needs `enable f16`, adapters with `SHADER_F16`).
    F16,
    /// 32-bit unsigned integer.
    U32,
    /// 32-bit signed integer.
    I32,
    /// 64-bit float: not in WGSL.
    F64,
    /// 8-bit signed integer: not in WGSL.
    I8,
    /// 16-bit signed integer: not in WGSL.
    I16,
    /// 8-bit unsigned integer: not in WGSL.
    U8,
    /// 16-bit unsigned integer: not in WGSL.
    U16,
    /// 64-bit signed integer: not in WGSL.
    I64,
    /// 64-bit unsigned integer: not in WGSL.
    U64,
}

impl ElemType {
    /// Every element type, for enumeration.
    pub const ALL: [ElemType; 11] = [
        Self::F32,
        Self::F16,
        Self::U32,
        Self::I32,
        Self::F64,
        Self::I8,
        Self::I16,
        Self::U8,
        Self::U16,
        Self::I64,
        Self::U64,
    ];

    /// The Rust (and, where it exists, WGSL) spelling.
    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::F16 => "f16",
            Self::U32 => "u32",
            Self::I32 => "i32",
            Self::F64 => "f64",
            Self::I8 => "i8",
            Self::I16 => "i16",
            Self::U8 => "u8",
            Self::U16 => "u16",
            Self::I64 => "i64",
            Self::U64 => "u64",
        }
    }

    /// Bytes per element.
    pub fn size_bytes(self) -> u32 {
        match self {
            Self::I8 | Self::U8 => 1,
            Self::F16 | Self::I16 | Self::U16 => 2,
            Self::F32 | Self::U32 | Self::I32 => 4,
            Self::F64 | Self::I64 | Self::U64 => 8,
        }
    }

    /// Why WGSL can't store this type, or `None` when it can.
    pub fn wgsl_problem(self) -> Option<&'static str> {
        match self {
            Self::F32 | Self::F16 | Self::U32 | Self::I32 => None,
            Self::F64 => {
                Some("WGSL has no f64 (it needs a SHADER_F64 extension that WebGPU lacks)")
            }
            Self::I8 | Self::U8 | Self::I16 | Self::U16 => Some(
                "WGSL has no 8- or 16-bit integers; store them packed in u32 or widen to i32/u32",
            ),
            Self::I64 | Self::U64 => Some("WGSL has no 64-bit integers without extensions"),
        }
    }
}

impl fmt::Display for ElemType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The text was not an element type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not an element type (expected one of f32, f16, u32, i32)")]
pub struct UnknownElemType(pub String);

impl FromStr for ElemType {
    type Err = UnknownElemType;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|e| e.name() == s)
            .ok_or_else(|| UnknownElemType(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_name_and_flags_wgsl_gaps() {
        for e in ElemType::ALL {
            assert_eq!(e.name().parse::<ElemType>(), Ok(e));
        }
        assert!(ElemType::F64.wgsl_problem().is_some());
        assert!(ElemType::I8.wgsl_problem().is_some());
        assert!(ElemType::F16.wgsl_problem().is_none());
        assert!("bf16".parse::<ElemType>().is_err());
    }
}
