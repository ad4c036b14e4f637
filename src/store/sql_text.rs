//! Enums stored as text, written once for every table.
//!
//! A stored status or kind uses the same name as on the wire (its serde name), so the database
//! reads like the protocol. Conversion never writes a placeholder: a value without a plain name
//! is an error when written, and an unknown name is an error when read.

use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ToSql, ToSqlOutput, ValueRef};

use crate::protocol::{FinishReason, InterjectionStatus, MessageStatus, Role, ToolCallStatus};

/// Why a value could not be stored or read as text.
#[derive(Debug, thiserror::Error)]
pub enum TextError {
    #[error("{type_name} has no plain name to store")]
    NoName { type_name: &'static str },
    #[error("unknown {type_name} {text:?} in the database")]
    Unknown {
        type_name: &'static str,
        text: String,
    },
}

/// The serde name of a unit variant.
pub fn name_of<T: serde::Serialize>(value: &T) -> Result<String, TextError> {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(name)) => Ok(name),
        _ => Err(TextError::NoName {
            type_name: std::any::type_name::<T>(),
        }),
    }
}

/// The unit variant with this serde name.
pub fn parse_name<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, TextError> {
    serde_json::from_value(serde_json::Value::String(text.to_string())).map_err(|_| {
        TextError::Unknown {
            type_name: std::any::type_name::<T>(),
            text: text.to_string(),
        }
    })
}

pub(super) fn to_sql<T: serde::Serialize>(value: &T) -> rusqlite::Result<ToSqlOutput<'static>> {
    name_of(value)
        .map(ToSqlOutput::from)
        .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))
}

pub(super) fn from_sql<T: serde::de::DeserializeOwned>(value: ValueRef<'_>) -> FromSqlResult<T> {
    parse_name(value.as_str()?).map_err(|e| FromSqlError::Other(Box::new(e)))
}

/// Implements `ToSql` and `FromSql` through the type's serde name.
macro_rules! stored_as_text {
    ($($t:ty),* $(,)?) => {$(
        impl ToSql for $t {
            fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
                to_sql(self)
            }
        }

        impl FromSql for $t {
            fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
                from_sql(value)
            }
        }
    )*};
}

stored_as_text!(
    Role,
    MessageStatus,
    ToolCallStatus,
    InterjectionStatus,
    FinishReason,
    super::runs::RunStatus,
    super::tool_calls::ApprovalStatus,
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ApprovalDecision;
    use crate::store::tool_calls::ApprovalStatus;
    use pretty_assertions::assert_eq;
    use rusqlite::Connection;

    fn round_trip<T: ToSql + FromSql>(value: T) -> (String, T) {
        let conn = Connection::open_in_memory().unwrap();
        conn.query_row("SELECT ?1, ?1", [&value], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
    }

    #[test]
    fn stored_names_are_the_wire_names() {
        assert_eq!(
            round_trip(Role::Assistant),
            ("assistant".into(), Role::Assistant)
        );
        assert_eq!(
            round_trip(ToolCallStatus::AwaitingApproval),
            ("awaitingApproval".into(), ToolCallStatus::AwaitingApproval)
        );
        assert_eq!(
            round_trip(InterjectionStatus::Promoted),
            ("promoted".into(), InterjectionStatus::Promoted)
        );
        assert_eq!(
            round_trip(FinishReason::MaxIterations),
            ("max_iterations".into(), FinishReason::MaxIterations)
        );
        for decision in [
            ApprovalDecision::Allow,
            ApprovalDecision::AllowAlways,
            ApprovalDecision::Deny,
        ] {
            assert_eq!(
                name_of(&decision).unwrap(),
                name_of(&ApprovalStatus::from(decision)).unwrap()
            );
        }
    }

    #[test]
    fn an_unknown_stored_name_is_an_error_not_a_default() {
        let conn = Connection::open_in_memory().unwrap();
        let error = conn
            .query_row("SELECT 'sideways'", [], |r| r.get::<_, Role>(0))
            .unwrap_err();
        assert!(
            error.to_string().contains("unknown") && error.to_string().contains("sideways"),
            "{error}"
        );
    }

    #[test]
    fn a_value_without_a_plain_name_is_refused_when_written() {
        #[derive(serde::Serialize)]
        struct NotAName {
            field: u8,
        }
        assert!(matches!(
            name_of(&NotAName { field: 1 }),
            Err(TextError::NoName { .. })
        ));
    }
}
