//! TOML files whose errors say where: the line, and the key dotted from the
//! top, for the policy file and the tools' cases files alike.

use serde::de::DeserializeOwned;

/// Where a TOML file is wrong, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Located {
    /// 1-based.
    pub(crate) line: usize,
    /// The key, dotted from the top (array indices left out: the line tells
    /// which entry), where one is to blame.
    pub(crate) key: Option<String>,
    /// The cause, on one line.
    pub(crate) message: String,
}

/// Deserializes `text`. An error is one line: the parser's own text quotes
/// the whole line, which may be huge, so only its cause is kept.
pub(crate) fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, Located> {
    parse(text).map_err(|(key, e)| {
        let message = e.message().trim_end();
        match e.span() {
            _ if message.contains("recurs") => {
                let (line, depth) = deepest_line(text);
                Located {
                    line,
                    key: None,
                    message: format!(
                        "{message}: keys or values nested {depth} levels deep; flatten this line"
                    ),
                }
            }
            Some(span) => {
                let line = line_of(text, span.start);
                Located {
                    line,
                    key: key.or_else(|| key_on_line(text, line)),
                    message: message.replace('\n', " "),
                }
            }
            None => Located {
                line: 1,
                key,
                message: message.replace('\n', " "),
            },
        }
    })
}

/// Deserializes the file, keeping the dotted key of a value serde refused
/// (array indices left out: the line tells which entry).
fn parse<T: DeserializeOwned>(text: &str) -> Result<T, (Option<String>, toml::de::Error)> {
    let de = toml::Deserializer::parse(text).map_err(|e| (None, e))?;
    serde_path_to_error::deserialize(de).map_err(|e| {
        let key = e
            .path()
            .iter()
            .filter_map(|seg| match seg {
                serde_path_to_error::Segment::Map { key } => Some(key.as_str()),
                serde_path_to_error::Segment::Enum { variant } => Some(variant.as_str()),
                _ => None,
            })
            .filter(|k| !k.starts_with("$__"))
            .collect::<Vec<_>>()
            .join(".");
        ((!key.is_empty()).then_some(key), e.into_inner())
    })
}

/// The key a `key = value` line sets, for errors the parser finds before
/// serde sees a key (a duplicate key, a bad value).
fn key_on_line(text: &str, line: usize) -> Option<String> {
    let (key, _) = text.lines().nth(line - 1)?.split_once('=')?;
    let key = key.trim();
    (!key.is_empty() && !key.starts_with('[')).then(|| key.to_owned())
}

/// The line with the most nesting (dots, brackets and braces), and how much.
fn deepest_line(text: &str) -> (usize, usize) {
    text.lines()
        .enumerate()
        .map(|(i, l)| {
            (
                i + 1,
                l.chars().filter(|c| matches!(c, '.' | '[' | '{')).count(),
            )
        })
        .max_by_key(|&(_, depth)| depth)
        .unwrap_or((1, 0))
}

/// 1-based line of a byte offset.
pub(crate) fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}
