//! An MCP tool result as the model reads it: one text, under the same size cap as the
//! built-in tools' output.

use serde_json::Value;

use crate::tools::ToolOutcome;

/// The most bytes a tool result may hold, as for the built-in `run_command`.
pub const RESULT_CAP: usize = 64 * 1024;

/// What a result turned into, and whether it was over the cap (which the user is told of).
#[derive(Debug, Clone, PartialEq)]
pub struct Converted {
    pub outcome: ToolOutcome,
    pub oversized: Option<usize>,
}

/// Turns a `tools/call` result (MCP's `CallToolResult` as JSON) into a tool outcome. Text is
/// kept; images and audio are described (the model is sent text results); resource links and
/// embedded resources show their URI and any text. `isError` makes it a failed result.
pub fn convert(tool: &str, result: &Value) -> Converted {
    let mut parts: Vec<String> = Vec::new();
    for item in result
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        parts.push(describe(item));
    }
    if parts.is_empty()
        && let Some(structured) = result.get("structuredContent")
    {
        parts.push(structured.to_string());
    }
    let text = parts.join("\n");
    let is_error = result
        .get("isError")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if text.len() > RESULT_CAP {
        let head = crate::tools::truncate(&text, 2048);
        let message = format!(
            "The result of {tool} was {} bytes, over the {} KiB limit for tool results, so it was not kept. Ask for less (a narrower query or a smaller range). Its beginning:\n{head}",
            text.len(),
            RESULT_CAP / 1024
        );
        return Converted {
            outcome: ToolOutcome::error(message),
            oversized: Some(text.len()),
        };
    }
    let outcome = match (is_error, text.is_empty()) {
        (true, true) => ToolOutcome::error(format!("{tool} failed without saying why.")),
        (true, false) => ToolOutcome::error(text),
        (false, _) => ToolOutcome::ok(text),
    };
    Converted {
        outcome,
        oversized: None,
    }
}

fn describe(item: &Value) -> String {
    let field = |name: &str| item.get(name).and_then(Value::as_str).unwrap_or_default();
    match field("type") {
        "text" => field("text").to_string(),
        "image" | "audio" => {
            let bytes = field("data").len() / 4 * 3;
            format!(
                "[{} {}, about {bytes} bytes, not shown]",
                field("type"),
                field("mimeType")
            )
        }
        "resource_link" => {
            let name = field("name");
            let uri = field("uri");
            match name.is_empty() {
                true => format!("[resource {uri}]"),
                false => format!("[resource {name}: {uri}]"),
            }
        }
        "resource" => {
            let resource = item.get("resource").unwrap_or(&Value::Null);
            let uri = resource
                .get("uri")
                .and_then(Value::as_str)
                .unwrap_or_default();
            match resource.get("text").and_then(Value::as_str) {
                Some(text) => format!("[resource {uri}]\n{text}"),
                None => format!("[resource {uri}, binary, not shown]"),
            }
        }
        other => format!("[{other} content, not shown]"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    #[test]
    fn text_images_and_links_become_one_text() {
        let result = json!({"content": [
            {"type": "text", "text": "hello"},
            {"type": "image", "data": "AAAA", "mimeType": "image/png"},
            {"type": "resource_link", "uri": "file:///a.txt", "name": "a.txt"},
            {"type": "resource", "resource": {"uri": "mem://x", "text": "inside"}}
        ]});
        assert_eq!(
            convert("t", &result).outcome,
            ToolOutcome::ok(
                "hello\n[image image/png, about 3 bytes, not shown]\n[resource a.txt: file:///a.txt]\n[resource mem://x]\ninside"
            )
        );
    }

    #[test]
    fn is_error_and_oversized_results_fail() {
        let failed = convert(
            "t",
            &json!({"content": [{"type": "text", "text": "no"}], "isError": true}),
        );
        assert_eq!(failed.outcome, ToolOutcome::error("no"));
        let big = "x".repeat(RESULT_CAP + 1);
        let over = convert("t", &json!({"content": [{"type": "text", "text": big}]}));
        assert!(over.outcome.is_error);
        assert_eq!(over.oversized, Some(RESULT_CAP + 1));
        assert!(over.outcome.output.len() < 4096);
    }
}
