//! Errors as the OpenAI API returns them: an HTTP status and
//! `{"error": {"message", "type", "param", "code"}}`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// A request the server answers with an error.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{status}: {message}")]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// OpenAI's error type: `invalid_request_error`, `not_found_error`, ...
    pub kind: &'static str,
    /// The request field at fault, if one is.
    pub param: Option<&'static str>,
    /// A machine-readable code (`model_not_found`, `context_length_exceeded`, ...).
    pub code: Option<&'static str>,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            kind,
            param: None,
            code: None,
        }
    }

    /// A request that cannot be served as written (400).
    pub fn invalid(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    /// A field out of its range or of the wrong kind (400).
    pub fn param(param: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            param: Some(param),
            ..ApiError::invalid(message)
        }
    }

    /// A model this server does not serve (404).
    pub fn unknown_model(name: &str) -> ApiError {
        ApiError {
            param: Some("model"),
            code: Some("model_not_found"),
            ..ApiError::new(
                StatusCode::NOT_FOUND,
                "invalid_request_error",
                format!("the model `{name}` does not exist here (GET /v1/models lists them)"),
            )
        }
    }

    /// A path or method the API does not have (404/405).
    pub fn no_route(status: StatusCode, what: &str) -> ApiError {
        ApiError::new(
            status,
            "invalid_request_error",
            format!("no route for {what}"),
        )
    }

    /// The prompt and its answer do not fit the context (400).
    pub fn too_long(message: impl Into<String>) -> ApiError {
        ApiError {
            param: Some("messages"),
            code: Some("context_length_exceeded"),
            ..ApiError::invalid(message)
        }
    }

    /// The queue is full (429).
    pub fn busy(waiting: usize) -> ApiError {
        ApiError {
            code: Some("server_busy"),
            ..ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "server_error",
                format!("{waiting} requests are waiting already: try again later"),
            )
        }
    }

    /// The server is shutting down (503).
    pub fn shutting_down() -> ApiError {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            "the server is shutting down",
        )
    }

    /// The request ran past its time (504).
    pub fn timeout(seconds: f64) -> ApiError {
        ApiError {
            code: Some("timeout"),
            ..ApiError::new(
                StatusCode::GATEWAY_TIMEOUT,
                "server_error",
                format!("the request ran past its limit of {seconds:.0} s"),
            )
        }
    }

    /// A fault of the server (500).
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
    }

    /// The error object, as the body of a response or an event of a stream.
    pub fn body(&self) -> serde_json::Value {
        json!({"error": {
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.code,
        }})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, axum::Json(self.body())).into_response()
    }
}
