//! Which models accept images (`data/image_input.json`), by the same longest-prefix lookup
//! as the context windows. A model the table does not know is taken not to: an image sent to
//! a text-only model fails the whole request at the provider, so it is refused here first,
//! by name.

use std::sync::OnceLock;

use serde::Deserialize;

const BUILTIN_JSON: &str = include_str!("../../data/image_input.json");

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Entry {
    prefix: String,
    images: bool,
}

#[derive(Deserialize)]
struct TableFile {
    models: Vec<Entry>,
}

fn table() -> &'static [Entry] {
    static TABLE: OnceLock<Vec<Entry>> = OnceLock::new();
    TABLE.get_or_init(|| match serde_json::from_str::<TableFile>(BUILTIN_JSON) {
        Ok(file) => file
            .models
            .into_iter()
            .map(|e| Entry {
                prefix: e.prefix.trim().to_ascii_lowercase(),
                images: e.images,
            })
            .collect(),
        Err(e) => {
            tracing::error!("built-in image input table unusable: {e}");
            Vec::new()
        }
    })
}

/// Whether `model` takes images as input.
pub fn accepts_images(model: &str) -> bool {
    let candidates = crate::context::name_candidates(model, true);
    crate::context::longest_prefix(table(), |e| e.prefix.as_str(), &candidates)
        .is_some_and(|e| e.images)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn the_table_parses_and_marks_the_families() {
        assert!(serde_json::from_str::<TableFile>(BUILTIN_JSON).is_ok());
        let models = [
            "claude-sonnet-4-5-20250929",
            "us.anthropic.claude-opus-4-1-v1:0",
            "gpt-4o-mini",
            "gpt-5.1",
            "o3-mini",
            "gpt-4-0613",
            "gpt-3.5-turbo",
            "gemma3:1b",
            "llama3.1:8b",
            "some-unknown-model",
        ];
        assert_eq!(
            models.map(accepts_images),
            [
                true, true, true, true, false, false, false, false, false, false
            ]
        );
    }
}
