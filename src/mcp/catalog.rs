//! A server's tools as the model is offered them: checked, filtered by the configuration and
//! named for the providers.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::names;
use super::spec::ServerSpec;
use crate::provider::ToolSpec;

/// One tool as a server listed it, reduced to what sidechat uses. This is also the form kept
/// in the tool-list cache.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListedTool {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub input_schema: Value,
    /// The server's `readOnlyHint`: with `trust`, the tool runs without asking.
    #[serde(default)]
    pub read_only: bool,
}

impl ListedTool {
    /// Reads a tool from `tools/list` JSON (MCP's `Tool`).
    pub fn from_mcp(tool: &Value) -> Result<Self, String> {
        let name = tool
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .ok_or("a tool without a name")?;
        let description = tool
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let input_schema = tool.get("inputSchema").cloned().unwrap_or(Value::Null);
        check_schema(&input_schema).map_err(|e| format!("tool {name:?}: {e}"))?;
        let read_only = tool
            .pointer("/annotations/readOnlyHint")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        Ok(Self {
            name: name.to_string(),
            description: description.to_string(),
            input_schema,
            read_only,
        })
    }
}

/// The providers need an object schema whose `properties` is an object and whose `required`
/// lists names; anything else makes the whole request fail, so such a tool is left out.
fn check_schema(schema: &Value) -> Result<(), String> {
    let Some(object) = schema.as_object() else {
        return Err("its input schema is not a JSON object".into());
    };
    if object.get("type").and_then(Value::as_str) != Some("object") {
        return Err("its input schema's type is not \"object\"".into());
    }
    if object.get("properties").is_some_and(|p| !p.is_object()) {
        return Err("its input schema's properties are not an object".into());
    }
    let required_ok = object.get("required").is_none_or(|r| {
        r.as_array()
            .is_some_and(|names| names.iter().all(Value::is_string))
    });
    if !required_ok {
        return Err("its input schema's required is not a list of names".into());
    }
    Ok(())
}

/// A tool offered to the model, with where it goes.
#[derive(Debug, Clone, PartialEq)]
pub struct OfferedTool {
    /// The name the model calls it by.
    pub exposed: String,
    /// The server's [`ServerSpec::key`].
    pub server_key: String,
    pub server_name: String,
    pub tool: ListedTool,
    /// Runs without asking: the server is trusted and marks the tool read-only.
    pub trusted: bool,
}

impl OfferedTool {
    pub fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.exposed.clone(),
            description: self.tool.description.clone(),
            input_schema: self.tool.input_schema.clone(),
        }
    }
}

/// What reading one server's tool list gave: the tools offered, and what was left out and why.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Offer {
    pub tools: Vec<OfferedTool>,
    pub problems: Vec<String>,
}

/// Names, filters and de-duplicates a server's tools. `taken` holds the names already offered
/// (built-in tools and other servers' tools); a clash keeps the first and reports the other.
pub fn offer(
    spec: &ServerSpec,
    listed: &[ListedTool],
    taken: &mut std::collections::HashSet<String>,
) -> Offer {
    let mut offer = Offer::default();
    for tool in listed.iter().filter(|t| spec.offers(&t.name)) {
        let exposed = names::exposed(&spec.name, &tool.name);
        if !taken.insert(exposed.clone()) {
            offer.problems.push(format!(
                "MCP server {:?} lists tool {:?} more than once (or under a name that clashes as {exposed}); only the first is offered",
                spec.name, tool.name
            ));
            continue;
        }
        offer.tools.push(OfferedTool {
            exposed,
            server_key: spec.key(),
            server_name: spec.name.clone(),
            trusted: spec.trust && tool.read_only,
            tool: tool.clone(),
        });
    }
    offer
}

/// Reads a whole `tools/list` answer: the tools that can be offered, and one problem line for
/// each that cannot.
pub fn read_listed(tools: &[Value]) -> (Vec<ListedTool>, Vec<String>) {
    let mut listed = Vec::new();
    let mut problems = Vec::new();
    for tool in tools {
        match ListedTool::from_mcp(tool) {
            Ok(tool) => listed.push(tool),
            Err(e) => problems.push(format!("{e}; it is not offered")),
        }
    }
    (listed, problems)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::spec::RawSpec;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn spec(trust: bool) -> ServerSpec {
        let raw = RawSpec {
            command: Some("x".into()),
            trust: Some(trust),
            ..RawSpec::default()
        };
        ServerSpec::check("srv", raw).unwrap()
    }

    #[test]
    fn invalid_schemas_are_left_out_with_a_reason() {
        let (listed, problems) = read_listed(&[
            json!({"name": "ok", "inputSchema": {"type": "object"}}),
            json!({"name": "str", "inputSchema": {"type": "string"}}),
            json!({"name": "props", "inputSchema": {"type": "object", "properties": []}}),
            json!({"inputSchema": {"type": "object"}}),
        ]);
        assert_eq!(listed.len(), 1);
        assert_eq!(
            problems,
            vec![
                "tool \"str\": its input schema's type is not \"object\"; it is not offered",
                "tool \"props\": its input schema's properties are not an object; it is not offered",
                "a tool without a name; it is not offered",
            ]
        );
    }

    #[test]
    fn duplicates_keep_the_first_and_trust_needs_read_only() {
        let (listed, _) = read_listed(&[
            json!({"name": "look", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}}),
            json!({"name": "look", "inputSchema": {"type": "object"}}),
            json!({"name": "write", "inputSchema": {"type": "object"}}),
        ]);
        let mut taken = Default::default();
        let offer = offer(&spec(true), &listed, &mut taken);
        let names: Vec<(&str, bool)> = offer
            .tools
            .iter()
            .map(|t| (t.exposed.as_str(), t.trusted))
            .collect();
        assert_eq!(
            names,
            vec![("mcp__srv__look", true), ("mcp__srv__write", false)]
        );
        assert_eq!(offer.problems.len(), 1);
    }
}
