//! [`Lexer`]: a script step split into words, `key=value` pairs and JSON
//! values, for the step parser ([`super::parse`]) and the expectation
//! parser ([`super::expect`]) both. It must never decide what a word means.

/// Splits a step into words and `key=value` pairs.
pub(super) struct Lexer<'a> {
    pub(super) text: &'a str,
    pub(super) pos: usize,
}

impl<'a> Lexer<'a> {
    pub(super) fn skip_space(&mut self) {
        let rest = &self.text[self.pos..];
        self.pos += rest.len() - rest.trim_start().len();
    }

    pub(super) fn rest(&self) -> &'a str {
        &self.text[self.pos..]
    }

    pub(super) fn word(&mut self) -> Option<&'a str> {
        self.skip_space();
        let rest = self.rest();
        let len = rest.find(char::is_whitespace).unwrap_or(rest.len());
        if len == 0 {
            return None;
        }
        self.pos += len;
        Some(&rest[..len])
    }

    pub(super) fn pair(&mut self) -> Result<Option<(String, serde_json::Value)>, String> {
        self.skip_space();
        let rest = self.rest();
        if rest.is_empty() {
            return Ok(None);
        }
        let Some(eq) = rest.find('=') else {
            let word = rest.split_whitespace().next().unwrap_or(rest);
            return Err(format!("expected field=value, found `{word}`"));
        };
        let key = &rest[..eq];
        if key.is_empty() || !key.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') {
            let word = rest.split_whitespace().next().unwrap_or(rest);
            return Err(format!("expected field=value, found `{word}`"));
        }
        self.pos += eq + 1;
        let value = self.value(&[])?;
        Ok(Some((key.to_owned(), value)))
    }

    /// A value ends at whitespace, or at any of `stops` (inside lists).
    pub(super) fn value(&mut self, stops: &[char]) -> Result<serde_json::Value, String> {
        let rest = self.rest();
        match rest.chars().next() {
            Some('"') | Some('{') => {
                let mut stream =
                    serde_json::Deserializer::from_str(rest).into_iter::<serde_json::Value>();
                let value = match stream.next() {
                    Some(Ok(value)) => value,
                    Some(Err(e)) => return Err(format!("bad JSON value: {e}")),
                    None => return Err("expected a value".into()),
                };
                self.pos += stream.byte_offset();
                Ok(value)
            }
            Some('[') => {
                self.pos += 1;
                let mut items = Vec::new();
                loop {
                    self.skip_space();
                    match self.rest().chars().next() {
                        Some(']') => {
                            self.pos += 1;
                            return Ok(serde_json::Value::Array(items));
                        }
                        Some(',') if !items.is_empty() => {
                            self.pos += 1;
                            self.skip_space();
                        }
                        None => return Err("a list is missing its closing `]`".into()),
                        _ => {}
                    }
                    if self.rest().starts_with(']') {
                        continue;
                    }
                    items.push(self.value(&[',', ']'])?);
                }
            }
            _ => {
                let len = rest
                    .find(|c: char| c.is_whitespace() || stops.contains(&c))
                    .unwrap_or(rest.len());
                let word = &rest[..len];
                self.pos += len;
                if word.is_empty() {
                    return Ok(serde_json::Value::String(String::new()));
                }
                // Numbers, booleans and null read as JSON; anything else is text.
                match serde_json::from_str::<serde_json::Value>(word) {
                    Ok(
                        v @ (serde_json::Value::Number(_)
                        | serde_json::Value::Bool(_)
                        | serde_json::Value::Null),
                    ) => Ok(v),
                    _ => Ok(serde_json::Value::String(word.to_owned())),
                }
            }
        }
    }
}
