//! `session/image`: the bytes of an image a message refers to (a `image` block of the
//! transcript carries only its reference, so a transcript stays small however many
//! screenshots a session holds).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionImageParams {
    pub session_id: String,
    /// An `image` block's `imageId`.
    pub image_id: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionImageResult {
    pub media_type: String,
    /// The image's bytes in base64.
    pub data: String,
}
