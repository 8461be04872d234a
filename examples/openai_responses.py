"""One turn with the OpenAI Responses API: route, send, check the model's call, answer.

Runs offline: the model's output is written out below, where your code would have
``openai.OpenAI().responses.create(**request).output``.
"""

import json
from pathlib import Path

from toolgate import Router

router = Router.from_tools(Path(__file__).with_name("github_tools.json"))
user = "which pull requests are open in acme/web?"
promotion = router.promote(router.route(user, top_k=3), format="openai-responses")
request = {
    "model": "gpt-4.1",
    "instructions": promotion.pool_text,  # what else exists, cacheable
    "input": [{"role": "user", "content": user}],
    "tools": promotion.request_tools(),  # the routed tools' full schemas
}
output = [  # the model's output items
    {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "list_pull_requests",
        "arguments": json.dumps({"repo": "acme/web"}),
    }
]
items = [*request["input"], *output]
for call in output:
    verdict = router.verify(call, promotion)
    if verdict.ok:  # run the tool (here: pretend), and answer the call by its call_id
        result = {"pull_requests": [], "repo": (verdict.arguments or {}).get("repo")}
        answer = {"type": "function_call_output", "call_id": call["call_id"]}
        items.append({**answer, "output": json.dumps(result)})
    else:  # the refusal goes back to the model, which corrects itself next turn
        items.append(verdict.to_tool_result("openai-responses"))
print(verdict)  # next: create(model=..., instructions=..., input=items, tools=request["tools"])
