//! Checks an image a client sends: base64 that decodes, one of the accepted types, the type it
//! claims, within the size limit, with dimensions in its header.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

/// The most bytes one image may hold once decoded: what Anthropic accepts per image, and
/// more than any screenshot needs.
pub const MAX_IMAGE_BYTES: usize = 5 * 1024 * 1024;

/// The most images one message may carry.
pub const MAX_IMAGES_PER_MESSAGE: usize = 20;

/// The media types accepted, which every provider that takes images reads.
pub const MEDIA_TYPES: [&str; 4] = ["image/png", "image/jpeg", "image/gif", "image/webp"];

/// Why an image was refused. Each names the image by its index in the message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImageError {
    #[error(
        "the message has {count} images, over the limit of {MAX_IMAGES_PER_MESSAGE} per message"
    )]
    TooMany { count: usize },
    #[error("image {index}: its data is not valid base64 ({problem})")]
    Base64 { index: usize, problem: String },
    #[error(
        "image {index}: media type {declared:?} is not accepted; use image/png, image/jpeg, image/gif or image/webp"
    )]
    MediaType { index: usize, declared: String },
    #[error("image {index}: declared {declared} but the data is {actual}")]
    Mismatch {
        index: usize,
        declared: String,
        actual: String,
    },
    #[error("image {index}: the data is not a PNG, JPEG, GIF or WebP image")]
    NotAnImage { index: usize },
    #[error(
        "image {index}: {size} bytes, over the limit of {MAX_IMAGE_BYTES} bytes (5 MiB) per image"
    )]
    TooLarge { index: usize, size: usize },
    #[error("image {index}: its header gives no dimensions ({problem})")]
    NoDimensions { index: usize, problem: String },
}

/// An image that passed every check: its bytes and what its header says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedImage {
    pub media_type: &'static str,
    pub width: u32,
    pub height: u32,
    pub data: Vec<u8>,
}

/// The media type of `bytes` by their signature, if they are one of the accepted types.
pub fn media_type_of(bytes: &[u8]) -> Option<&'static str> {
    match imagesize::image_type(bytes).ok()? {
        imagesize::ImageType::Png => Some("image/png"),
        imagesize::ImageType::Jpeg => Some("image/jpeg"),
        imagesize::ImageType::Gif => Some("image/gif"),
        imagesize::ImageType::Webp => Some("image/webp"),
        _ => None,
    }
}

/// Checks a message's images, `(mediaType, base64 data)` each, in order; the first problem
/// refuses them all, so nothing of a message with a bad image is stored.
pub fn check_images<'a>(
    images: impl ExactSizeIterator<Item = (&'a str, &'a str)>,
) -> Result<Vec<CheckedImage>, ImageError> {
    if images.len() > MAX_IMAGES_PER_MESSAGE {
        return Err(ImageError::TooMany {
            count: images.len(),
        });
    }
    images
        .enumerate()
        .map(|(index, (media_type, data))| check_image(index, media_type, data))
        .collect()
}

/// Checks one image; `index` names it in the error.
pub fn check_image(index: usize, declared: &str, data: &str) -> Result<CheckedImage, ImageError> {
    let media_type = MEDIA_TYPES
        .into_iter()
        .find(|t| t.eq_ignore_ascii_case(declared.trim()))
        .ok_or_else(|| ImageError::MediaType {
            index,
            declared: declared.to_string(),
        })?;
    // A base64 text longer than this decodes to more than the limit: refused unread.
    let longest = MAX_IMAGE_BYTES.div_ceil(3) * 4;
    let data = data.trim();
    if data.len() > longest + 4 {
        return Err(ImageError::TooLarge {
            index,
            size: data.len() / 4 * 3,
        });
    }
    let bytes = STANDARD.decode(data).map_err(|e| ImageError::Base64 {
        index,
        problem: e.to_string(),
    })?;
    check_bytes(index, media_type, bytes)
}

/// Checks decoded bytes against the type they are said to be.
pub fn check_bytes(
    index: usize,
    media_type: &'static str,
    bytes: Vec<u8>,
) -> Result<CheckedImage, ImageError> {
    if bytes.len() > MAX_IMAGE_BYTES {
        return Err(ImageError::TooLarge {
            index,
            size: bytes.len(),
        });
    }
    let actual = media_type_of(&bytes).ok_or(ImageError::NotAnImage { index })?;
    if actual != media_type {
        return Err(ImageError::Mismatch {
            index,
            declared: media_type.to_string(),
            actual: actual.to_string(),
        });
    }
    let size = imagesize::blob_size(&bytes).map_err(|e| ImageError::NoDimensions {
        index,
        problem: e.to_string(),
    })?;
    let dimension = |n: usize| u32::try_from(n).ok().filter(|&n| n > 0);
    let (Some(width), Some(height)) = (dimension(size.width), dimension(size.height)) else {
        return Err(ImageError::NoDimensions {
            index,
            problem: format!("{} × {}", size.width, size.height),
        });
    };
    Ok(CheckedImage {
        media_type,
        width,
        height,
        data: bytes,
    })
}

/// An image in a few words: `image/png, 640×480, 48213 bytes`.
pub fn describe(image: &CheckedImage) -> String {
    format!(
        "{}, {}×{}, {} bytes",
        image.media_type,
        image.width,
        image.height,
        image.data.len()
    )
}

/// The base64 text of `bytes`, as providers and clients take it.
pub fn encode(bytes: &[u8]) -> String {
    STANDARD.encode(bytes)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    /// A valid PNG of `width` × `height`: its signature and IHDR chunk, which is all a header
    /// reader looks at.
    pub(crate) fn png(width: u32, height: u32) -> Vec<u8> {
        let mut bytes = vec![0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a];
        bytes.extend(13u32.to_be_bytes());
        bytes.extend(b"IHDR");
        bytes.extend(width.to_be_bytes());
        bytes.extend(height.to_be_bytes());
        bytes.extend([8, 6, 0, 0, 0]);
        bytes.extend([0, 0, 0, 0]);
        bytes
    }

    #[test]
    fn a_png_is_read_from_its_header() {
        let checked = check_image(0, "image/png", &encode(&png(640, 480))).unwrap();
        assert_eq!(
            (checked.media_type, checked.width, checked.height),
            ("image/png", 640, 480)
        );
    }

    #[test]
    fn each_problem_names_the_image_and_the_limit() {
        let good = encode(&png(2, 2));
        let cases = [
            (
                check_image(3, "image/png", "not base64!"),
                "image 3: its data is not valid base64",
            ),
            (
                check_image(1, "image/bmp", &good),
                "image 1: media type \"image/bmp\" is not accepted",
            ),
            (
                check_image(2, "image/jpeg", &good),
                "image 2: declared image/jpeg but the data is image/png",
            ),
            (
                check_image(0, "image/png", &encode(b"plain text, not an image")),
                "image 0: the data is not a PNG, JPEG, GIF or WebP image",
            ),
            (
                check_image(4, "image/png", &encode(&vec![0; MAX_IMAGE_BYTES + 1])),
                "image 4: 5242881 bytes, over the limit of 5242880 bytes (5 MiB) per image",
            ),
        ];
        for (result, expected) in cases {
            let error = result.unwrap_err().to_string();
            assert!(error.starts_with(expected), "{error}");
        }
    }

    #[test]
    fn more_than_twenty_images_are_refused_whole() {
        let good = encode(&png(1, 1));
        let images = vec![("image/png", good.as_str()); MAX_IMAGES_PER_MESSAGE + 1];
        assert_eq!(
            check_images(images.into_iter()).unwrap_err().to_string(),
            "the message has 21 images, over the limit of 20 per message"
        );
        let images = vec![("image/png", good.as_str()); MAX_IMAGES_PER_MESSAGE];
        assert_eq!(check_images(images.into_iter()).unwrap().len(), 20);
    }
}
