//! Input checks of `settings` and `gc`: pure, like every check in `input`.

use crate::error::EngineError;
use crate::model::Settings;
use crate::validate as v;
use crate::wire::*;

/// Most days `keep_days` may say: a century.
pub(in crate::engine) const KEEP_DAYS_MAX: u32 = 36_500;

/// Most hours `keep_read_hours` may say: a century.
pub(in crate::engine) const KEEP_READ_HOURS_MAX: u32 = 876_000;

/// Default threads one `gc` call removes at most.
pub(in crate::engine) const GC_LIMIT_DEFAULT: u32 = 1000;

/// Most threads one `gc` call may remove.
pub(in crate::engine) const GC_LIMIT_MAX: u32 = 10_000;

/// The limits given; unset ones are left as stored.
#[derive(Clone, Copy, Default)]
pub(in crate::engine) struct KeepInput {
    pub(in crate::engine) keep_days: Option<u32>,
    pub(in crate::engine) keep_messages: Option<u32>,
    pub(in crate::engine) keep_read_hours: Option<u32>,
}

impl KeepInput {
    fn check(
        keep_days: Option<u32>,
        keep_messages: Option<u32>,
        keep_read_hours: Option<u32>,
    ) -> Result<KeepInput, EngineError> {
        let at_most = |field: &str, value: Option<u32>, max: u32| match value {
            Some(n) if n > max => Err(EngineError::invalid(
                field,
                format!("is {n}; it must be between 0 and {max}"),
            )),
            _ => Ok(value),
        };
        Ok(KeepInput {
            keep_days: at_most("keep_days", keep_days, KEEP_DAYS_MAX)?,
            keep_messages,
            keep_read_hours: at_most("keep_read_hours", keep_read_hours, KEEP_READ_HOURS_MAX)?,
        })
    }

    /// `settings` with these limits over it.
    pub(in crate::engine) fn over(self, settings: &Settings) -> Settings {
        Settings {
            keep_days: self.keep_days.unwrap_or(settings.keep_days),
            keep_messages: self.keep_messages.unwrap_or(settings.keep_messages),
            keep_read_hours: self.keep_read_hours.unwrap_or(settings.keep_read_hours),
            ..settings.clone()
        }
    }
}

pub(in crate::engine) struct SettingsInput {
    pub(in crate::engine) request: SettingsRequest,
    pub(in crate::engine) keep: KeepInput,
}

pub(in crate::engine) fn settings(r: SettingsRequest) -> Result<SettingsInput, EngineError> {
    let keep = KeepInput::check(r.keep_days, r.keep_messages, r.keep_read_hours)?;
    Ok(SettingsInput { request: r, keep })
}

pub(in crate::engine) struct GcInput {
    pub(in crate::engine) keep: KeepInput,
    pub(in crate::engine) dry_run: bool,
    pub(in crate::engine) limit: usize,
}

pub(in crate::engine) fn gc(r: GcRequest) -> Result<GcInput, EngineError> {
    let limit = v::bounded(
        "limit",
        r.limit.map(u64::from),
        u64::from(GC_LIMIT_DEFAULT),
        u64::from(GC_LIMIT_MAX),
    )?;
    Ok(GcInput {
        keep: KeepInput::check(r.keep_days, r.keep_messages, r.keep_read_hours)?,
        dry_run: r.dry_run,
        limit: usize::try_from(limit).unwrap_or(usize::MAX),
    })
}
