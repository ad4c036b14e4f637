//! Reading what tests look at in a `session/transcript` result.

use serde_json::Value;

/// One tool result block: `(call id, output, isError, status)`.
pub type ToolResult = (String, String, bool, String);

/// The tool results of a transcript, in order.
pub fn tool_results(transcript: &Value) -> Vec<ToolResult> {
    transcript["entries"]
        .as_array()
        .expect("a transcript's entries")
        .iter()
        .filter(|e| e["role"] == "tool")
        .flat_map(|e| e["blocks"].as_array().expect("an entry's blocks").clone())
        .map(|b| {
            (
                b["callId"].as_str().expect("callId").to_string(),
                b["output"].as_str().expect("output").to_string(),
                b["isError"].as_bool().expect("isError"),
                b["status"].as_str().expect("status").to_string(),
            )
        })
        .collect()
}
