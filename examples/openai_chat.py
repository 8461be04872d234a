"""One turn with the OpenAI Chat Completions API: route, send, check the model's call, answer.

Runs offline: the model's reply is written out below, where your code would have
``openai.OpenAI().chat.completions.create(**request).choices[0].message``.
"""

import json
from pathlib import Path

from toolgate import Router

router = Router.from_tools(Path(__file__).with_name("github_tools.json"))
user = "open an issue in acme/web about the flaky login test"
promotion = router.promote(router.route(user, top_k=3), format="openai")
request = {
    "model": "gpt-4.1",
    "messages": [
        {"role": "system", "content": promotion.pool_text},  # what else exists, cacheable
        {"role": "user", "content": user},
    ],
    "tools": promotion.request_tools(),  # the routed tools' full schemas
}
reply = {  # the model's message
    "role": "assistant",
    "tool_calls": [
        {
            "id": "call_1",
            "type": "function",
            "function": {
                "name": "create_issue",
                "arguments": json.dumps({"repo": "acme/web", "title": "Flaky login test"}),
            },
        }
    ],
}
messages = [*request["messages"], reply]
for call in reply["tool_calls"]:
    verdict = router.verify(call, promotion)
    if verdict.ok:  # run the tool (here: pretend), and answer the call
        output = {"opened": verdict.tool_id, **(verdict.arguments or {})}
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": json.dumps(output)})
    else:  # the refusal goes back to the model, which corrects itself next turn
        messages.append(verdict.to_tool_result("openai"))
print(verdict)  # next: create(model=..., messages=messages, tools=request["tools"])
