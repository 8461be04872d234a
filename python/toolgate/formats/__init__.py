"""Each provider's shapes in one place: tools, requests and tool calls, read and written.

One module per tool format: :mod:`~toolgate.formats.mcp`, :mod:`~toolgate.formats.openai`
(Chat function wrappers and Responses tools), :mod:`~toolgate.formats.anthropic`,
:mod:`~toolgate.formats.gemini` (function declarations; the OpenAPI schema subset in
:mod:`~toolgate.formats.gemini_schema`), :mod:`~toolgate.formats.jsonl` and
:mod:`~toolgate.formats.text_tags`. Readers turn their input into
:class:`~toolgate.formats.raw.RawTool` records and never raise on a bad tool: a record carries a
``problem`` instead, so the catalog can report every offender at once.

Above them: :mod:`~toolgate.formats.tool_dict` (one tool dict in any shape),
:mod:`~toolgate.formats.documents` (a whole document), :mod:`~toolgate.formats.requests` (LLM
requests), :mod:`~toolgate.formats.calls` (a model's tool calls),
:mod:`~toolgate.formats.definition` (a definition's input schema) and
:mod:`~toolgate.formats.tokens` (what each provider's serialisation costs).
"""
