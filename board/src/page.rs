//! The page: one HTML file, its script modules and its style sheet,
//! embedded in the binary (`include_str!`), so the board needs no CDN, no
//! build step and no files beside the program. The script builds every
//! element with DOM calls and puts agents' text in with `textContent`
//! only (see `page/markdown.js` for bodies); the Content-Security-Policy
//! ([`crate::guard`]) allows these files and nothing else. This module
//! must never put data into a page: the page fetches it from the API,
//! with the token (see [`crate::guard`]).

use std::sync::Arc;

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::Board;

/// Each embedded file: its path, content type and content.
const FILES: &[(&str, &str, &str)] = &[
    (
        "/",
        "text/html; charset=utf-8",
        include_str!("page/index.html"),
    ),
    (
        "/board.js",
        "text/javascript; charset=utf-8",
        include_str!("page/board.js"),
    ),
    (
        "/views.js",
        "text/javascript; charset=utf-8",
        include_str!("page/views.js"),
    ),
    (
        "/markdown.js",
        "text/javascript; charset=utf-8",
        include_str!("page/markdown.js"),
    ),
    (
        "/board.css",
        "text/css; charset=utf-8",
        include_str!("page/board.css"),
    ),
    (
        "/favicon.svg",
        "image/svg+xml",
        include_str!("page/favicon.svg"),
    ),
];

/// Whether `path` is one of the page's own files: all a request without
/// the token may have, since they hold no data.
pub(crate) fn is_page_file(path: &str) -> bool {
    FILES.iter().any(|&(file, _, _)| file == path)
}

/// The page's routes.
pub(crate) fn routes() -> Router<Arc<Board>> {
    FILES
        .iter()
        .fold(Router::new(), |router, &(path, kind, content)| {
            router.route(path, get(move || async move { file(kind, content) }))
        })
}

fn file(kind: &'static str, content: &'static str) -> Response {
    let mut response = content.into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    response
}
