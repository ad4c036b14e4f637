//! A session's own MCP servers and the cached tool lists of every server configuration.

use rusqlite::{OptionalExtension, params};

use super::{Store, StoreResult};
use crate::util::now_ms;

impl Store {
    /// Records a session's own MCP servers, as the MCP layer encodes them for keeping
    /// ([`crate::mcp::spec::encode_stored`], which leaves secret values out). The store keeps
    /// the text as given and knows nothing of its shape.
    pub fn set_session_mcp_servers(&self, session_id: &str, json: &str) -> StoreResult<()> {
        self.write(|conn| {
            conn.execute(
                "INSERT INTO session_mcp_servers (session_id, servers) VALUES (?1, ?2)
                 ON CONFLICT (session_id) DO UPDATE SET servers = excluded.servers",
                params![session_id, json],
            )?;
            Ok(())
        })
    }

    /// The session's own MCP servers as they were recorded; `None` for most sessions.
    pub fn session_mcp_servers(&self, session_id: &str) -> StoreResult<Option<String>> {
        self.read(|conn| {
            Ok(conn
                .query_row(
                    "SELECT servers FROM session_mcp_servers WHERE session_id = ?1",
                    [session_id],
                    |row| row.get(0),
                )
                .optional()?)
        })
    }

    /// Caches a server's tool list under its configuration key.
    pub fn save_mcp_tools(&self, key: &str, tools_json: &str) -> StoreResult<()> {
        self.write(|conn| {
            conn.execute(
                "INSERT INTO mcp_tool_cache (config_key, tools, updated_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT (config_key) DO UPDATE SET tools = excluded.tools,
                                                        updated_at = excluded.updated_at",
                params![key, tools_json, now_ms()],
            )?;
            Ok(())
        })
    }

    /// The tool list last cached under a configuration key.
    pub fn mcp_tools(&self, key: &str) -> StoreResult<Option<String>> {
        self.read(|conn| {
            Ok(conn
                .query_row(
                    "SELECT tools FROM mcp_tool_cache WHERE config_key = ?1",
                    [key],
                    |row| row.get(0),
                )
                .optional()?)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::NewSession;
    use pretty_assertions::assert_eq;

    #[test]
    fn servers_are_kept_as_given_and_tools_by_key() {
        let store = Store::open_in_memory().unwrap();
        let session = store
            .insert_session(&NewSession {
                title: "t".into(),
                account: "demo".into(),
                model: "demo".into(),
                system_prompt: None,
                workspace_root: None,
                max_steps: 5,
                cap_usd: None,
                max_seconds: None,
                rollover_secs: None,
            })
            .unwrap();
        assert_eq!(store.session_mcp_servers(&session.id).unwrap(), None);
        store.set_session_mcp_servers(&session.id, "[1]").unwrap();
        store.set_session_mcp_servers(&session.id, "[2]").unwrap();
        assert_eq!(
            store.session_mcp_servers(&session.id).unwrap().as_deref(),
            Some("[2]")
        );
        assert_eq!(store.mcp_tools("k").unwrap(), None);
        store.save_mcp_tools("k", "[1]").unwrap();
        store.save_mcp_tools("k", "[2]").unwrap();
        assert_eq!(store.mcp_tools("k").unwrap().as_deref(), Some("[2]"));
    }
}
