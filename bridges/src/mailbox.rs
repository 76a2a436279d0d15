//! The message types of a `mailbox.jsonl` log (`.agenties/mailbox.jsonl`:
//! one message per line, its `type` one of [`MessageType::ALL`]). This
//! module only names them; what each becomes in inbox is mapped by the
//! log's import (`inbox import --from mailbox`) and by the MCP server's
//! mailbox tools.

use serde::Deserialize;

/// The message types of a `mailbox.jsonl` log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum MessageType {
    /// Work for `to` (opens a thread it claims).
    TaskAssigned,
    /// The result of a thread you hold (needs threadId; the same as done).
    TaskDone,
    /// A review for `to` to do (opens a thread it claims).
    ReviewRequest,
    /// A reviewer's verdict on the thread it holds (needs threadId; the same as done; put the verdict in metadata).
    ReviewResult,
    /// A question (opens a thread, or asks in threadId).
    Question,
    /// The answer to a question (needs threadId; unblocks a blocked worker).
    Answer,
    /// Stop a thread (needs threadId; the same as cancel).
    Cancel,
    /// Progress (in threadId), or a notice (a new thread).
    Status,
    /// Anything else: a notice.
    Custom,
}

impl MessageType {
    /// Every type, in the seed's order.
    pub const ALL: [MessageType; 9] = [
        MessageType::TaskAssigned,
        MessageType::TaskDone,
        MessageType::ReviewRequest,
        MessageType::ReviewResult,
        MessageType::Question,
        MessageType::Answer,
        MessageType::Cancel,
        MessageType::Status,
        MessageType::Custom,
    ];

    /// The seed's name for it.
    pub fn as_str(self) -> &'static str {
        match self {
            MessageType::TaskAssigned => "task-assigned",
            MessageType::TaskDone => "task-done",
            MessageType::ReviewRequest => "review-request",
            MessageType::ReviewResult => "review-result",
            MessageType::Question => "question",
            MessageType::Answer => "answer",
            MessageType::Cancel => "cancel",
            MessageType::Status => "status",
            MessageType::Custom => "custom",
        }
    }

    /// The type named `text`, if the seed has it.
    pub fn parse(text: &str) -> Option<MessageType> {
        MessageType::ALL.into_iter().find(|t| t.as_str() == text)
    }

    /// Whether the agent the line is about sends it (a worker reporting)
    /// rather than receives it (work, answers, cancellations).
    pub fn sent_by_worker(self) -> bool {
        !matches!(
            self,
            MessageType::TaskAssigned
                | MessageType::ReviewRequest
                | MessageType::Answer
                | MessageType::Cancel
        )
    }
}
