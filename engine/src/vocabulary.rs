//! Closed sets of names written on the wire: the [`Vocabulary`] trait and the
//! `vocabulary!` macro that defines one from a table of variants, spellings
//! and descriptions (statuses, kinds, priorities, event types, error codes).
//!
//! A vocabulary is declared once; its list of values, its spellings, its
//! parser and its documentation all come from that declaration, so a host
//! that offers the values (a CLI's value list, generated docs, TypeScript
//! declarations) can never offer a different set than the engine accepts.
//! Which value a command *allows* is a rule, and rules live in the engine's
//! input checks, never here.

/// A closed set of wire names, declared with `vocabulary!`.
pub trait Vocabulary: Copy + Eq + std::fmt::Debug + 'static {
    /// What one value is called in messages: "status", "kind".
    const NOUN: &'static str;
    /// Every value, in declaration (documentation) order.
    const ALL: &'static [Self];

    /// The wire and storage spelling.
    fn as_str(self) -> &'static str;

    /// What the value means, in one sentence (for help and generated docs).
    fn description(self) -> &'static str;

    /// Parses the wire spelling; `None` for anything else.
    fn parse(text: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|v| v.as_str() == text)
    }

    /// The allowed spellings, comma-separated, for error messages.
    fn expected() -> String {
        Self::ALL
            .iter()
            .map(|v| v.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The message for a spelling that is not in the set: the same words
    /// whichever host (a JSON decoder, a command line) meets it.
    fn unknown(text: &str) -> String {
        let given = if text.is_empty() {
            "an empty value".to_owned()
        } else {
            format!("`{text}`")
        };
        format!(
            "{given} is not a {}; use one of {}",
            Self::NOUN,
            Self::expected()
        )
    }
}

/// Defines a vocabulary enum: its variants with their wire spellings and
/// one-sentence descriptions, serde and (with the `typescript` and `schema`
/// features) TypeScript and JSON Schema derives, [`Vocabulary`], inherent shortcuts and `Display`.
macro_rules! vocabulary {
    (
        $(#[$meta:meta])*
        pub enum $name:ident ($noun:literal) { $($variant:ident = $text:literal : $doc:literal,)+ }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
        #[cfg_attr(feature = "typescript", derive(tsify::Tsify))]
        #[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
        pub enum $name { $(#[doc = $doc] #[serde(rename = $text)] $variant,)+ }

        impl $crate::vocabulary::Vocabulary for $name {
            const NOUN: &'static str = $noun;
            const ALL: &'static [$name] = &[$($name::$variant,)+];

            fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text,)+ }
            }

            fn description(self) -> &'static str {
                match self { $($name::$variant => $doc,)+ }
            }

            fn parse(text: &str) -> Option<$name> {
                match text { $($text => Some($name::$variant),)+ _ => None }
            }
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = <$name as $crate::vocabulary::Vocabulary>::ALL;

            /// The wire and storage spelling.
            pub fn as_str(self) -> &'static str {
                $crate::vocabulary::Vocabulary::as_str(self)
            }

            /// What the value means, in one sentence (for generated docs).
            pub fn description(self) -> &'static str {
                $crate::vocabulary::Vocabulary::description(self)
            }

            /// Parses the wire spelling; `None` for anything else.
            pub fn parse(text: &str) -> Option<$name> {
                <$name as $crate::vocabulary::Vocabulary>::parse(text)
            }

            /// The allowed spellings, comma-separated, for error messages.
            pub fn expected() -> String {
                <$name as $crate::vocabulary::Vocabulary>::expected()
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                $crate::vocabulary::deserialize(deserializer)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

pub(crate) use vocabulary;

/// Decodes a vocabulary value from its spelling, refusing anything else with
/// [`Vocabulary::unknown`]'s message.
pub(crate) fn deserialize<'de, V: Vocabulary, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<V, D::Error> {
    struct Visit<V>(std::marker::PhantomData<V>);
    impl<V: Vocabulary> serde::de::Visitor<'_> for Visit<V> {
        type Value = V;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "a {} ({})", V::NOUN, V::expected())
        }
        fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<V, E> {
            V::parse(text).ok_or_else(|| E::custom(V::unknown(text)))
        }
    }
    deserializer.deserialize_str(Visit(std::marker::PhantomData))
}
