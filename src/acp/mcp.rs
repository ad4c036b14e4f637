//! ACP's `mcpServers` (on `session/new`, `session/load`, `session/resume`) as the runtime's
//! session MCP servers.

use agent_client_protocol_schema::v1 as acp;

use crate::protocol::McpServerParams;

/// The servers sidechat can run: stdio and streamable HTTP. An SSE server (a transport MCP
/// has retired) is left out and named in the returned list of skipped servers.
pub fn servers(given: Vec<acp::McpServer>) -> (Vec<McpServerParams>, Vec<String>) {
    let mut servers = Vec::new();
    let mut skipped = Vec::new();
    for server in given {
        match server {
            acp::McpServer::Stdio(stdio) => servers.push(McpServerParams {
                name: stdio.name,
                command: Some(stdio.command.display().to_string()),
                args: stdio.args,
                env: stdio.env.into_iter().map(|v| (v.name, v.value)).collect(),
                ..McpServerParams::default()
            }),
            acp::McpServer::Http(http) => servers.push(McpServerParams {
                name: http.name,
                url: Some(http.url),
                headers: http
                    .headers
                    .into_iter()
                    .map(|h| (h.name, h.value))
                    .collect(),
                ..McpServerParams::default()
            }),
            acp::McpServer::Sse(sse) => {
                skipped.push(format!("{} (SSE is not supported)", sse.name))
            }
            _ => skipped.push("a server of an unknown transport".to_string()),
        }
    }
    (servers, skipped)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    #[test]
    fn stdio_and_http_servers_carry_over_and_sse_is_named() {
        let given: Vec<acp::McpServer> = serde_json::from_value(json!([
            {"name": "fs", "command": "/usr/bin/fs-server", "args": ["--root", "/w"],
             "env": [{"name": "TOKEN", "value": "t"}]},
            {"type": "http", "name": "docs", "url": "http://127.0.0.1:1/mcp",
             "headers": [{"name": "X-Api-Key", "value": "k"}]},
            {"type": "sse", "name": "old", "url": "http://127.0.0.1:1/sse", "headers": []}
        ]))
        .unwrap();
        let (servers, skipped) = servers(given);
        assert_eq!(
            servers,
            vec![
                McpServerParams {
                    name: "fs".into(),
                    command: Some("/usr/bin/fs-server".into()),
                    args: vec!["--root".into(), "/w".into()],
                    env: [("TOKEN".to_string(), "t".to_string())].into(),
                    ..McpServerParams::default()
                },
                McpServerParams {
                    name: "docs".into(),
                    url: Some("http://127.0.0.1:1/mcp".into()),
                    headers: [("X-Api-Key".to_string(), "k".to_string())].into(),
                    ..McpServerParams::default()
                },
            ]
        );
        assert_eq!(skipped, vec!["old (SSE is not supported)"]);
    }
}
