//! Images sent with a message: what is accepted ([`input`]), which models take them
//! ([`models`]) and what they cost in tokens ([`tokens`]).
//!
//! An image is checked once, when it arrives, from its bytes alone: its real type and its
//! dimensions come from its header, so nothing ever decodes pixels.

pub mod input;
pub mod models;
pub mod tokens;

pub use input::{
    CheckedImage, ImageError, MAX_IMAGE_BYTES, MAX_IMAGES_PER_MESSAGE, MEDIA_TYPES, check_image,
    check_images, media_type_of,
};
pub use models::accepts_images;
pub use tokens::{ImageFormula, image_tokens};
