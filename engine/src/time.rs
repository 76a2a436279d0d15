//! Time as the engine sees it: a [`Timestamp`] in milliseconds since the Unix
//! epoch, a [`Clock`] the host injects, and the one text form every host renders
//! (RFC 3339, UTC, milliseconds: `2026-01-01T09:30:00.000Z`).
//!
//! This module must never read the system clock. Hosts wrap their own clock
//! (`SystemTime`, `Date.now()`, a WIT import) in a [`Clock`]; tests and
//! transition scripts use [`ManualClock`].
//!
//! The RFC 3339 conversion is written here rather than taken from a date crate:
//! the engine needs exactly one fixed format in both directions, and a date
//! crate would add several crates to every wasm build for that. The
//! conversion is checked against the `time` crate by property tests.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A point in time: milliseconds since 1970-01-01T00:00:00Z.
///
/// Only years 0000 to 9999 can be rendered; [`Timestamp::MIN`] and
/// [`Timestamp::MAX`] bound the values hosts may pass in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(i64);

impl Timestamp {
    /// 0000-01-01T00:00:00.000Z.
    pub const MIN: Timestamp = Timestamp(-62_167_219_200_000);
    /// 9999-12-31T23:59:59.999Z.
    pub const MAX: Timestamp = Timestamp(253_402_300_799_999);

    /// Builds a timestamp from milliseconds since the epoch, clamped to the
    /// renderable range so that a wild host clock cannot produce text that
    /// does not parse back.
    pub fn from_millis(millis: i64) -> Timestamp {
        Timestamp(millis.clamp(Self::MIN.0, Self::MAX.0))
    }

    /// Milliseconds since the epoch.
    pub fn as_millis(self) -> i64 {
        self.0
    }

    /// This time plus `millis` (negative moves back), clamped to the
    /// renderable range.
    pub fn plus_millis(self, millis: i64) -> Timestamp {
        Timestamp::from_millis(self.0.saturating_add(millis))
    }

    /// This time plus whole seconds, clamped to the renderable range.
    pub fn plus_seconds(self, seconds: u64) -> Timestamp {
        let millis = i64::try_from(seconds)
            .unwrap_or(i64::MAX)
            .saturating_mul(1000);
        self.plus_millis(millis)
    }

    /// Parses the engine's text form. Accepts `Z` only, with 0 to 9 fraction
    /// digits (extra precision is truncated to milliseconds), so that every
    /// accepted string names exactly one instant.
    pub fn parse(text: &str) -> Result<Timestamp, TimestampError> {
        // Stores hand back every timestamp in the canonical 24-byte form, and
        // reads parse four per thread: decode that form digit by digit.
        if let Some(t) = Timestamp::parse_canonical(text.as_bytes()) {
            return Ok(t);
        }
        Timestamp::parse_general(text)
    }

    /// `YYYY-MM-DDTHH:MM:SS.mmmZ` exactly, or `None` (the general parser then
    /// decides, and reports errors).
    fn parse_canonical(b: &[u8]) -> Option<Timestamp> {
        let &[
            y0,
            y1,
            y2,
            y3,
            b'-',
            mo0,
            mo1,
            b'-',
            d0,
            d1,
            b'T',
            h0,
            h1,
            b':',
            mi0,
            mi1,
            b':',
            s0,
            s1,
            b'.',
            f0,
            f1,
            f2,
            b'Z',
        ] = b
        else {
            return None;
        };
        let mut n = [0i64; 17];
        for (slot, &c) in n.iter_mut().zip(&[
            y0, y1, y2, y3, mo0, mo1, d0, d1, h0, h1, mi0, mi1, s0, s1, f0, f1, f2,
        ]) {
            if !c.is_ascii_digit() {
                return None;
            }
            *slot = i64::from(c - b'0');
        }
        let year = n[0] * 1000 + n[1] * 100 + n[2] * 10 + n[3];
        let month = n[4] * 10 + n[5];
        let day = n[6] * 10 + n[7];
        let (hour, minute, second) = (n[8] * 10 + n[9], n[10] * 10 + n[11], n[12] * 10 + n[13]);
        let millis = n[14] * 100 + n[15] * 10 + n[16];
        if !(1..=12).contains(&month)
            || day < 1
            || day > days_in_month(year, month)
            || hour > 23
            || minute > 59
            || second > 59
        {
            return None;
        }
        let seconds =
            days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second;
        Some(Timestamp(seconds * 1000 + millis))
    }

    fn parse_general(text: &str) -> Result<Timestamp, TimestampError> {
        let err = || TimestampError {
            text: text.to_owned(),
        };
        let b = text.as_bytes();
        if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' {
            return Err(err());
        }
        if b[13] != b':' || b[16] != b':' || *b.last().ok_or_else(err)? != b'Z' {
            return Err(err());
        }
        let num = |range: std::ops::Range<usize>| -> Result<i64, TimestampError> {
            let part = &b[range];
            if part.iter().all(u8::is_ascii_digit) {
                Ok(part.iter().fold(0, |acc, d| acc * 10 + i64::from(d - b'0')))
            } else {
                Err(err())
            }
        };
        let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
        let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
        let millis = match &b[19..b.len() - 1] {
            [] => 0,
            [b'.', digits @ ..] if (1..=9).contains(&digits.len()) => {
                let mut value = num(20..20 + digits.len())?;
                for _ in digits.len()..3 {
                    value *= 10;
                }
                for _ in 3..digits.len() {
                    value /= 10;
                }
                value
            }
            _ => return Err(err()),
        };
        if !(1..=12).contains(&month)
            || day < 1
            || day > days_in_month(year, month)
            || hour > 23
            || minute > 59
            || second > 59
        {
            return Err(err());
        }
        let days = days_from_civil(year, month, day);
        let seconds = days * 86_400 + hour * 3600 + minute * 60 + second;
        Ok(Timestamp(seconds * 1000 + millis))
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let millis = self.0.rem_euclid(1000);
        let seconds = self.0.div_euclid(1000);
        let days = seconds.div_euclid(86_400);
        let in_day = seconds.rem_euclid(86_400);
        let (year, month, day) = civil_from_days(days);
        write!(
            f,
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
            in_day / 3600,
            in_day / 60 % 60,
            in_day % 60
        )
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        Timestamp::parse(&text).map_err(serde::de::Error::custom)
    }
}

// Written by hand, like the serde impls above: on the wire a timestamp is
// its text form, which a derive would describe as an integer.
#[cfg(feature = "schema")]
impl schemars::JsonSchema for Timestamp {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Timestamp".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "format": "date-time",
            "description": "RFC 3339 in UTC with a `Z`, e.g. 2026-01-01T09:30:00.000Z",
        })
    }
}

/// A string that is not an RFC 3339 UTC timestamp in the engine's form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{text}` is not a UTC timestamp; write it as YYYY-MM-DDTHH:MM:SS.sssZ, e.g. 2026-01-01T09:30:00.000Z"
)]
pub struct TimestampError {
    /// The rejected text.
    pub text: String,
}

/// Where the engine gets "now". Called once per command, so every record a
/// command writes carries the same instant.
pub trait Clock {
    /// The current time. Hosts should return wall-clock time; the engine
    /// tolerates a clock that goes backwards (leases simply last longer).
    fn now(&mut self) -> Timestamp;

    /// Milliseconds on a clock that never goes back, from an arbitrary
    /// start: what a [`crate::Waiter`] measures deadlines and heartbeats
    /// on, so that a wall clock stepped back neither stretches a timeout
    /// nor stops a heartbeat. Hosts return their monotonic clock
    /// (`Instant`, `performance.now()`); the default reads [`Clock::now`],
    /// right for clocks that never step (a [`ManualClock`]).
    fn ticks(&mut self) -> u64 {
        u64::try_from(self.now().as_millis()).unwrap_or(0)
    }
}

/// A clock that only moves when told to: for tests, transition scripts and
/// hosts that replay a log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ManualClock {
    now: Timestamp,
}

impl ManualClock {
    /// Where transition scripts start unless they set the clock:
    /// 2026-01-01T00:00:00.000Z.
    pub const SCRIPT_EPOCH: Timestamp = Timestamp(1_767_225_600_000);

    /// A clock stopped at `now`.
    pub fn new(now: Timestamp) -> ManualClock {
        ManualClock { now }
    }

    /// Moves the clock to `now` (backwards too; scripts refuse that earlier).
    pub fn set(&mut self, now: Timestamp) {
        self.now = now;
    }

    /// Moves the clock forward by `millis`.
    pub fn advance_millis(&mut self, millis: i64) {
        self.now = self.now.plus_millis(millis);
    }

    /// The time the clock shows, without the `&mut` that [`Clock::now`] takes.
    pub fn peek(&self) -> Timestamp {
        self.now
    }
}

impl Clock for ManualClock {
    fn now(&mut self) -> Timestamp {
        self.now
    }
}

impl<F: FnMut() -> Timestamp> Clock for F {
    fn now(&mut self) -> Timestamp {
        self()
    }
}

fn is_leap(year: i64) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

// Days between 1970-01-01 and a proleptic Gregorian date, and back. These are
// the well-known era-based formulas (400-year eras of 146,097 days).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let year_of_era = y - era * 400;
    let month_from_march = (month + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_milliseconds_in_utc() {
        assert_eq!(
            ManualClock::SCRIPT_EPOCH.to_string(),
            "2026-01-01T00:00:00.000Z"
        );
        assert_eq!(Timestamp(0).to_string(), "1970-01-01T00:00:00.000Z");
        assert_eq!(Timestamp(-1).to_string(), "1969-12-31T23:59:59.999Z");
        assert_eq!(Timestamp::MIN.to_string(), "0000-01-01T00:00:00.000Z");
        assert_eq!(Timestamp::MAX.to_string(), "9999-12-31T23:59:59.999Z");
    }

    #[test]
    fn parses_what_it_renders_and_common_precisions() {
        let t = Timestamp::parse("2026-03-01T09:30:05.120Z").unwrap();
        assert_eq!(t.to_string(), "2026-03-01T09:30:05.120Z");
        assert_eq!(
            Timestamp::parse("2026-03-01T09:30:05Z")
                .unwrap()
                .as_millis()
                % 1000,
            0
        );
        assert_eq!(
            Timestamp::parse("2026-03-01T09:30:05.1Z")
                .unwrap()
                .as_millis()
                % 1000,
            100
        );
        assert_eq!(
            Timestamp::parse("2026-03-01T09:30:05.123456789Z")
                .unwrap()
                .as_millis()
                % 1000,
            123
        );
    }

    #[test]
    fn rejects_anything_ambiguous() {
        for bad in [
            "",
            "2026-03-01",
            "2026-03-01T09:30:05",
            "2026-03-01T09:30:05+00:00",
            "2026-02-30T00:00:00Z",
            "2026-13-01T00:00:00Z",
            "2026-03-01T24:00:00Z",
            "2026-03-01T09:30:05.Z",
            "2026-03-01T09:30:05.1234567890Z",
            "2026-03-01 09:30:05Z",
            "+026-03-01T09:30:05Z",
        ] {
            assert!(Timestamp::parse(bad).is_err(), "{bad} should not parse");
        }
    }
}
