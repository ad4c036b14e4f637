//! What an image costs in input tokens, by each provider's published formula. Both scale the
//! image first as the provider does, then count what is left.

/// Whose formula counts an image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageFormula {
    /// About width × height / 750, after scaling to at most 1568 pixels on the long edge and
    /// about 1.2 megapixels.
    Anthropic,
    /// 85 plus 170 per 512-pixel tile at high detail, after scaling to fit 2048 × 2048 and
    /// then to at most 768 pixels on the short side.
    OpenAi,
}

impl ImageFormula {
    /// The formula for a model: Anthropic's for Claude models, OpenAI's (which compatible
    /// servers follow or undercut) for every other.
    pub fn for_model(model: &str) -> Self {
        if model.to_ascii_lowercase().contains("claude") {
            ImageFormula::Anthropic
        } else {
            ImageFormula::OpenAi
        }
    }
}

/// Anthropic's long-edge limit before it scales an image down.
const ANTHROPIC_LONG_EDGE: f64 = 1568.0;
/// Anthropic's pixel limit before it scales an image down. Its guide speaks of about 1.15
/// megapixels, yet lists sizes it sends unscaled up to 784 × 1568 (1.23 MP): the limit is
/// taken at 1.23 MP so none of those is counted short.
const ANTHROPIC_PIXELS: f64 = 1_230_000.0;

/// The input tokens of one `width` × `height` image for `formula`.
pub fn image_tokens(formula: ImageFormula, width: u32, height: u32) -> u64 {
    let (w, h) = (f64::from(width.max(1)), f64::from(height.max(1)));
    match formula {
        ImageFormula::Anthropic => {
            let scale = 1f64
                .min(ANTHROPIC_LONG_EDGE / w.max(h))
                .min((ANTHROPIC_PIXELS / (w * h)).sqrt());
            let (w, h) = ((w * scale).floor().max(1.0), (h * scale).floor().max(1.0));
            (w * h / 750.0).ceil() as u64
        }
        ImageFormula::OpenAi => {
            let fit = 1f64.min(2048.0 / w.max(h));
            let (w, h) = (w * fit, h * fit);
            let short = 1f64.min(768.0 / w.min(h));
            let (w, h) = ((w * short).floor(), (h * short).floor());
            let tiles = (w / 512.0).ceil() * (h / 512.0).ceil();
            85 + 170 * tiles as u64
        }
    }
}

/// The image tokens of the messages of a request to `model`.
pub fn request_image_tokens(model: &str, messages: &[crate::provider::ModelMessage]) -> u64 {
    let formula = ImageFormula::for_model(model);
    messages
        .iter()
        .flat_map(|m| &m.content)
        .map(|content| match content {
            crate::provider::ModelContent::Image { width, height, .. } => {
                image_tokens(formula, *width, *height)
            }
            _ => 0,
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    /// The examples of Anthropic's vision guide: 1092 × 1092 (at the limit) is about 1590
    /// tokens; a 200 × 200 image about 54; a large one is scaled down first.
    #[test]
    fn anthropic_counts_pixels_over_750_after_its_scaling() {
        let counts = [
            (200, 200),
            (1000, 1000),
            (1092, 1092),
            (4000, 3000),
            (5000, 800),
        ]
        .map(|(w, h)| image_tokens(ImageFormula::Anthropic, w, h));
        // 4000 × 3000 scales to 1280 × 960 (1.23 MP); 5000 × 800 to 1568 × 250 (long edge).
        assert_eq!(counts, [54, 1334, 1590, 1639, 523]);
    }

    /// The examples of OpenAI's vision guide: 1024 × 1024 is 765 tokens at high detail, and
    /// 2048 × 4096 is 1105.
    #[test]
    fn openai_counts_tiles_after_its_scaling() {
        let counts = [(1024, 1024), (2048, 4096), (512, 512), (100, 3000)]
            .map(|(w, h)| image_tokens(ImageFormula::OpenAi, w, h));
        // 100 × 3000 fits 2048 as 68 × 2048: one tile across, four down.
        assert_eq!(counts, [765, 1105, 255, 765]);
    }

    #[test]
    fn the_formula_follows_the_model() {
        assert_eq!(
            [
                "claude-sonnet-4-5",
                "anthropic/claude-opus-4",
                "gpt-4o",
                "gemma3"
            ]
            .map(ImageFormula::for_model),
            [
                ImageFormula::Anthropic,
                ImageFormula::Anthropic,
                ImageFormula::OpenAi,
                ImageFormula::OpenAi
            ]
        );
    }
}
