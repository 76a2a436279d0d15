//! A tool's input schema as MCP lists it: a JSON object ([`Object`]),
//! made from a Rust type's JSON Schema ([`schema_of`]). Both the command
//! table's tools ([`crate::catalog`]) and the mailbox tools
//! ([`crate::seed`]) use it. This module must never decide which tools
//! there are.

use schemars::generate::SchemaSettings;
use serde_json::{Map, Value};

/// A JSON object: a tool's input schema, or a call's arguments.
pub(crate) type Object = Map<String, Value>;

/// The JSON Schema of `T` as a tool's input schema: self-contained (no
/// `$ref`, which some runtimes do not follow), without the keywords that
/// only name the Rust type.
pub(crate) fn schema_of<T: schemars::JsonSchema>() -> Object {
    let generator = SchemaSettings::draft2020_12()
        .with(|settings| settings.inline_subschemas = true)
        .into_generator();
    let mut schema = generator.into_root_schema_for::<T>().to_value();
    let object = schema
        .as_object_mut()
        .map(std::mem::take)
        .unwrap_or_default();
    let mut object = object;
    for keyword in ["$schema", "title", "description"] {
        object.remove(keyword);
    }
    object
}
