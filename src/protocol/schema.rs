//! JSON Schema export of the wire types, one file per method plus the event notification.

use schemars::{JsonSchema, SchemaGenerator};
use serde_json::{Value, json};

use super::*;

/// One file of `schema/`: its name and pretty-printed contents.
#[derive(Debug, Clone, PartialEq)]
pub struct SchemaFile {
    pub name: String,
    pub contents: String,
}

fn root<T: JsonSchema>() -> Value {
    let schema = SchemaGenerator::default().into_root_schema_for::<T>();
    schema.to_value()
}

/// Collects each declared method's schema file, in declaration order.
#[derive(Default)]
struct Entries(Vec<(String, Value)>);

impl MethodVisitor for Entries {
    /// A request's params and result schemas side by side.
    fn request<M: Request>(&mut self) {
        self.0.push((
            M::METHOD.to_string(),
            json!({
                "method": M::METHOD,
                "direction": M::DIRECTION.wire_name(),
                "params": root::<M::Params>(),
                "result": root::<M::Result>(),
            }),
        ));
    }

    fn notification<N: Notification>(&mut self) {
        self.0.push((
            N::METHOD.to_string(),
            json!({
                "method": N::METHOD,
                "direction": N::DIRECTION.wire_name(),
                "params": root::<N::Params>(),
            }),
        ));
    }
}

/// Every method and notification of the native protocol.
fn entries() -> Vec<(String, Value)> {
    let mut entries = Entries::default();
    visit_methods(&mut entries);
    entries.0
}

/// File name for a method: `session/create` → `session.create.json`.
pub fn file_name(method: &str) -> String {
    format!("{}.json", method.replace('/', "."))
}

/// The complete contents of `schema/`, in a stable order.
pub fn generate_schema_files() -> Vec<SchemaFile> {
    let entries = entries();
    let index = json!({
        "protocol": "sidechat",
        "protocolVersion": PROTOCOL_VERSION,
        "methods": entries.iter().map(|(name, _)| json!({"method": name, "file": file_name(name)})).collect::<Vec<_>>(),
    });
    let mut files = vec![SchemaFile {
        name: "index.json".to_string(),
        contents: pretty(&index),
    }];
    files.extend(entries.into_iter().map(|(name, value)| SchemaFile {
        name: file_name(&name),
        contents: pretty(&value),
    }));
    files
}

fn pretty(value: &Value) -> String {
    let mut text = serde_json::to_string_pretty(value).unwrap_or_default();
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `schema/` is generated from these types; regenerate with `cargo run -- schema`.
    #[test]
    fn checked_in_schema_is_current() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("schema");
        let mut stale = Vec::new();
        let files = generate_schema_files();
        for file in &files {
            let on_disk = std::fs::read_to_string(dir.join(&file.name)).unwrap_or_default();
            if on_disk != file.contents {
                stale.push(file.name.clone());
            }
        }
        let mut extra: Vec<String> = std::fs::read_dir(&dir)
            .map(|entries| {
                entries
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|name| !files.iter().any(|f| &f.name == name))
                    .collect()
            })
            .unwrap_or_default();
        stale.append(&mut extra);
        assert!(
            stale.is_empty(),
            "schema/ is stale ({stale:?}); run `cargo run -- schema` and commit the result"
        );
    }

    #[test]
    fn every_method_has_a_file() {
        let names: Vec<String> = generate_schema_files()
            .into_iter()
            .map(|f| f.name)
            .collect();
        for method in METHODS {
            assert!(names.contains(&file_name(method.name)), "{}", method.name);
        }
    }
}
