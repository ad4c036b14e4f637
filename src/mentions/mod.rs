//! `@`-mentions: files, ranges of lines and folders of the workspace that the user names in a
//! message, found in the text by [`parse`] and attached to it for the model to read
//! ([`resolve`]).

mod attach;
mod parse;

pub use attach::{Attached, Resolved, resolve};
pub use parse::{Mention, parse};
