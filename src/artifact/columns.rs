//! The Arrow fields the row schemas ([`super::schema`]) are written with: UTF-8, integers, floats
//! and lists, nullable or not.

use arrow::datatypes::{DataType, Field, FieldRef};
use std::sync::Arc;

pub(super) fn f(name: &str, dt: DataType, nullable: bool) -> FieldRef {
    Arc::new(Field::new(name, dt, nullable))
}
pub(super) fn utf8(name: &str) -> FieldRef {
    f(name, DataType::Utf8, false)
}
pub(super) fn utf8_null(name: &str) -> FieldRef {
    f(name, DataType::Utf8, true)
}
pub(super) fn u32f(name: &str) -> FieldRef {
    f(name, DataType::UInt32, false)
}
pub(super) fn u64f(name: &str) -> FieldRef {
    f(name, DataType::UInt64, false)
}
pub(super) fn f64f(name: &str) -> FieldRef {
    f(name, DataType::Float64, false)
}
pub(super) fn f64_null(name: &str) -> FieldRef {
    f(name, DataType::Float64, true)
}
pub(super) fn list_f64_null(name: &str) -> FieldRef {
    let item = Arc::new(Field::new("item", DataType::Float64, false));
    f(name, DataType::List(item), true)
}
pub(super) fn list_utf8(name: &str) -> FieldRef {
    let item = Arc::new(Field::new("item", DataType::Utf8, false));
    f(name, DataType::List(item), false)
}
