"""One turn with the Gemini API: route, send, check the model's call, answer.

Gemini takes declarations wrapped in one tool, ``[{"functionDeclarations": [...]}]``:
``promotion.request_tools()`` wraps them. Runs offline: the model's content is written out
below, where your code would have the ``candidates[0].content`` of a ``generateContent`` call.
"""

from pathlib import Path

from toolgate import Router

router = Router.from_tools(Path(__file__).with_name("github_tools.json"))
user = "find where the login retry logic lives in our code"
promotion = router.promote(router.route(user, top_k=3), format="gemini")
request = {
    "systemInstruction": {"parts": [{"text": promotion.pool_text}]},  # what else exists
    "contents": [{"role": "user", "parts": [{"text": user}]}],
    "tools": promotion.request_tools(),  # the routed tools' declarations, wrapped
}
content = {  # the model's content
    "role": "model",
    "parts": [{"functionCall": {"name": "search_code", "args": {"query": "login retry"}}}],
}
answers = []
for part in content["parts"]:
    verdict = router.verify(part, promotion)
    if verdict.ok:  # run the tool (here: pretend), and answer the call by its name
        result = {"matches": ["auth/retry.py"], "query": (verdict.arguments or {}).get("query")}
        answers.append({"functionResponse": {"name": verdict.name, "response": result}})
    else:  # the refusal goes back to the model, which corrects itself next turn
        answers.append(verdict.to_tool_result("gemini"))
contents = [*request["contents"], content, {"role": "user", "parts": answers}]
print(verdict)  # next: generateContent with contents=contents and the same tools
