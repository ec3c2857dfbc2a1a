//! Conversations rendered with a model's own chat template (the Jinja source a GGUF file
//! or `tokenizer_config.json` carries), as Hugging Face's `apply_chat_template` renders
//! them: blocks trimmed, `raise_exception` and Python's string methods available.

use minijinja::{Environment, ErrorKind, context};

use super::GenerateError;
use crate::gguf::{Gguf, MetadataValue};
use crate::tokenizer::Tokenizer;

/// One message of a conversation.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ChatMessage {
    /// Who speaks: `system`, `user` or `assistant`.
    pub role: String,
    /// What they say.
    pub content: String,
}

impl ChatMessage {
    /// A message from `role`.
    pub fn new(role: &str, content: &str) -> ChatMessage {
        ChatMessage {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// A chat template, parsed once.
///
/// ```
/// use rlx::generate::{ChatMessage, ChatTemplate};
/// let template = ChatTemplate::new(
///     "{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}\n{% endfor %}\
///      {% if add_generation_prompt %}<assistant>{% endif %}",
///     "<s>",
///     "</s>",
/// )?;
/// let text = template.render(&[ChatMessage::new("user", " Hi ")], true)?;
/// assert_eq!(text, "<user>Hi\n<assistant>");
/// # Ok::<(), rlx::generate::GenerateError>(())
/// ```
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .finish_non_exhaustive()
    }
}

/// The template's name in its environment.
const NAME: &str = "chat";

impl ChatTemplate {
    /// Parses `source`; `bos_token` and `eos_token` are the strings templates see under
    /// those names.
    pub fn new(
        source: &str,
        bos_token: &str,
        eos_token: &str,
    ) -> Result<ChatTemplate, GenerateError> {
        let mut env = Environment::new();
        // Hugging Face renders with trim_blocks and lstrip_blocks.
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function(
            "raise_exception",
            |message: String| -> Result<String, minijinja::Error> {
                Err(minijinja::Error::new(ErrorKind::InvalidOperation, message))
            },
        );
        env.add_template_owned(NAME, source.to_string())
            .map_err(|e| GenerateError::Template(e.to_string()))?;
        Ok(ChatTemplate {
            env,
            bos_token: bos_token.into(),
            eos_token: eos_token.into(),
        })
    }

    /// The template a GGUF file carries (`tokenizer.chat_template`), with its tokenizer's
    /// beginning- and end-of-sequence strings.
    pub fn from_gguf(file: &Gguf, tokenizer: &Tokenizer) -> Result<ChatTemplate, GenerateError> {
        let source = file
            .get("tokenizer.chat_template")
            .and_then(MetadataValue::as_str)
            .ok_or_else(|| {
                GenerateError::Template("the file has no tokenizer.chat_template".into())
            })?;
        let text = |id: Option<u32>| id.and_then(|id| tokenizer.token(id)).unwrap_or_default();
        let eos = tokenizer.stop_tokens().first().copied();
        ChatTemplate::new(source, &text(tokenizer.bos()), &text(eos))
    }

    /// The template of the Hugging Face folder `dir`: `chat_template.jinja` when present,
    /// else `tokenizer_config.json`'s `chat_template` (a string, or a list of named
    /// templates of which the one named `default` is taken), with that file's
    /// `bos_token` and `eos_token` strings.
    pub fn from_hf_dir(dir: &std::path::Path) -> Result<ChatTemplate, GenerateError> {
        let error = |what: String| GenerateError::Template(what);
        let config_path = dir.join("tokenizer_config.json");
        let config: serde_json::Value = match std::fs::read_to_string(&config_path) {
            Ok(text) => serde_json::from_str(&text)
                .map_err(|e| error(format!("{}: not JSON: {e}", config_path.display())))?,
            Err(_) => serde_json::Value::Null,
        };
        let special = |key: &str| match config.get(key) {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(serde_json::Value::Object(o)) => o
                .get("content")
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default()
                .to_string(),
            _ => String::new(),
        };
        let jinja = dir.join("chat_template.jinja");
        let source = match std::fs::read_to_string(&jinja) {
            Ok(source) => source,
            Err(_) => match config.get("chat_template") {
                Some(serde_json::Value::String(s)) => s.clone(),
                Some(serde_json::Value::Array(named)) => named
                    .iter()
                    .find(|t| t.get("name").and_then(serde_json::Value::as_str) == Some("default"))
                    .and_then(|t| t.get("template"))
                    .and_then(serde_json::Value::as_str)
                    .ok_or_else(|| error("no chat template named \"default\"".into()))?
                    .to_string(),
                _ => {
                    return Err(error(format!(
                        "{} has no chat template (no chat_template.jinja, no chat_template in tokenizer_config.json)",
                        dir.display()
                    )));
                }
            },
        };
        ChatTemplate::new(&source, &special("bos_token"), &special("eos_token"))
    }

    /// The conversation as the model expects to read it, ending with the opening of the
    /// assistant's turn when `add_generation_prompt`.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String, GenerateError> {
        let template = self
            .env
            .get_template(NAME)
            .map_err(|e| GenerateError::Template(e.to_string()))?;
        template
            .render(context! {
                messages => messages,
                add_generation_prompt => add_generation_prompt,
                bos_token => &self.bos_token,
                eos_token => &self.eos_token,
            })
            .map_err(|e| GenerateError::Template(e.to_string()))
    }
}
