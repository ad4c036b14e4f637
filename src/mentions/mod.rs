//! `@`-mentions: files, ranges of lines and folders of the workspace that the user names in a
//! message, found in the text by [`parse`] and attached to it for the model to read
//! ([`resolve`]); and the workspace's files ranked for `@` completion ([`FileIndex`], [`rank`]).

mod attach;
mod files;
mod parse;

pub use attach::{Attached, Resolved, resolve};
pub use files::{FileIndex, rank};
pub use parse::{Mention, parse};
