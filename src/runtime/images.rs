//! Images on their way in and out: checked when a message brings them, stored once, read back
//! by `session/image`, and put into a request just before it is sent.

use super::{Inner, Runtime, RuntimeError, RuntimeResult};
use crate::images::{CheckedImage, accepts_images, check_images};
use crate::protocol::{Block, ImageInput, SessionImageParams, SessionImageResult};
use crate::provider::{ModelContent, ModelRequest};

/// Checks a message's images for the session's `model`: each image, the count, and that the
/// model takes images at all. Nothing is stored before this passes.
pub(super) fn check_send(model: &str, images: &[ImageInput]) -> RuntimeResult<Vec<CheckedImage>> {
    if images.is_empty() {
        return Ok(Vec::new());
    }
    let checked = check_images(
        images
            .iter()
            .map(|i| (i.media_type.as_str(), i.data.as_str())),
    )
    .map_err(|e| RuntimeError::InvalidParams(e.to_string()))?;
    refuse_unless_accepted(model)?;
    Ok(checked)
}

/// Refuses images for a model the model table marks as text-only, by name.
pub(super) fn refuse_unless_accepted(model: &str) -> RuntimeResult<()> {
    if accepts_images(model) {
        return Ok(());
    }
    Err(RuntimeError::InvalidParams(format!(
        "the model {model} does not accept images; send the text alone, or switch to a model \
         that reads images"
    )))
}

impl Runtime {
    /// Stores each image (once per content) for `session_id` and returns the blocks that
    /// refer to them.
    pub(super) fn store_images(
        &self,
        session_id: &str,
        images: &[CheckedImage],
    ) -> RuntimeResult<Vec<Block>> {
        images
            .iter()
            .map(|image| Ok(self.inner.store.put_image(session_id, image)?))
            .collect()
    }

    /// `session/image`: the bytes of an image a message of the session refers to.
    pub fn image(&self, params: SessionImageParams) -> RuntimeResult<SessionImageResult> {
        self.session_row(&params.session_id)?;
        let image = self
            .inner
            .store
            .session_image(&params.session_id, &params.image_id)?
            .ok_or_else(|| RuntimeError::NotFound {
                what: "image in this session",
                id: params.image_id.clone(),
            })?;
        Ok(SessionImageResult {
            media_type: image.media_type,
            data: crate::images::input::encode(&image.data),
        })
    }
}

impl Inner {
    /// Puts each image's bytes into `request`, whose projection carries only references. An
    /// image the store no longer has, or any image for a model that does not take them (the
    /// session's model changed since), becomes a line of text saying so: the request still
    /// goes out, and the model knows something was there.
    pub(super) fn fill_images(&self, request: &mut ModelRequest) {
        let accepted = accepts_images(&request.model);
        for message in &mut request.messages {
            for content in &mut message.content {
                let ModelContent::Image {
                    image_id,
                    media_type,
                    width,
                    height,
                    data,
                } = content
                else {
                    continue;
                };
                let found = match accepted {
                    true => self.store.image(image_id).unwrap_or_else(|e| {
                        tracing::warn!(error = %e, "cannot read an image for a request");
                        None
                    }),
                    false => None,
                };
                match found {
                    Some(image) => *data = crate::images::input::encode(&image.data),
                    None => {
                        let why = match accepted {
                            true => "it is no longer stored",
                            false => "this model does not accept images",
                        };
                        *content = ModelContent::Text {
                            text: format!(
                                "[An image ({media_type}, {width}×{height}) was here; {why}.]"
                            ),
                        };
                    }
                }
            }
        }
    }
}
