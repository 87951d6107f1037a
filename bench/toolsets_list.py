"""Make ``bench/toolsets_catalog.json``: the tools of real MCP servers, as listed.

Run (once; needs the servers installed, which the project does not depend on):

    npm install --ignore-scripts --prefix /tmp/mcpcat @modelcontextprotocol/server-everything \\
        @modelcontextprotocol/server-filesystem @modelcontextprotocol/server-github \\
        @modelcontextprotocol/server-gitlab @modelcontextprotocol/server-google-maps \\
        @modelcontextprotocol/server-memory @modelcontextprotocol/server-puppeteer \\
        @modelcontextprotocol/server-slack @modelcontextprotocol/server-brave-search \\
        @modelcontextprotocol/server-sequential-thinking @modelcontextprotocol/server-postgres \\
        @modelcontextprotocol/server-aws-kb-retrieval @modelcontextprotocol/server-everart \\
        @playwright/mcp @notionhq/notion-mcp-server mcp-server-kubernetes \\
        @wonderwhy-er/desktop-commander firecrawl-mcp tavily-mcp @upstash/context7-mcp \\
        exa-mcp-server
    python -m venv /tmp/mcppy && /tmp/mcppy/bin/pip install mcp-server-fetch mcp-server-git \\
        mcp-server-time
    .venv/bin/python -m bench.toolsets_list bench/toolsets_catalog.json

Each server is started over stdio with placeholder credentials (listing tools
needs none) and asked ``tools/list`` through the MCP SDK's client.
"""

from __future__ import annotations

import json
import os
import sys

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

NODE = "/tmp/mcpcat/node_modules/.bin/"
PYTHON = "/tmp/mcppy/bin/"
PLACEHOLDERS = {
    name: "x"
    for name in (
        "GITHUB_PERSONAL_ACCESS_TOKEN",
        "GITLAB_PERSONAL_ACCESS_TOKEN",
        "GOOGLE_MAPS_API_KEY",
        "SLACK_BOT_TOKEN",
        "SLACK_TEAM_ID",
        "BRAVE_API_KEY",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "EVERART_API_KEY",
        "TAVILY_API_KEY",
        "EXA_API_KEY",
        "NOTION_TOKEN",
    )
} | {"AWS_REGION": "us-east-1", "FIRECRAWL_API_KEY": "fc-x"}
SERVERS: list[list[str]] = [
    [NODE + "mcp-server-everything"],
    [NODE + "mcp-server-filesystem", "/tmp"],
    [NODE + "mcp-server-github"],
    [NODE + "mcp-server-gitlab"],
    [NODE + "mcp-server-google-maps"],
    [NODE + "mcp-server-memory"],
    [NODE + "mcp-server-puppeteer"],
    [NODE + "mcp-server-slack"],
    [NODE + "mcp-server-brave-search"],
    [NODE + "mcp-server-sequential-thinking"],
    [NODE + "mcp-server-postgres", "postgresql://localhost/x"],
    [NODE + "mcp-server-aws-kb-retrieval"],
    [NODE + "mcp-server-everart"],
    [NODE + "playwright-mcp"],
    [NODE + "notion-mcp-server"],
    [NODE + "mcp-server-kubernetes"],
    [NODE + "desktop-commander"],
    [NODE + "firecrawl-mcp"],
    [NODE + "tavily-mcp"],
    [NODE + "context7-mcp"],
    [NODE + "exa-mcp-server"],
    [PYTHON + "mcp-server-fetch"],
    [PYTHON + "mcp-server-git"],
    [PYTHON + "mcp-server-time"],
]


async def list_tools(argv: list[str]) -> list[dict[str, object]]:
    params = StdioServerParameters(
        command=argv[0], args=argv[1:], env={**os.environ, **PLACEHOLDERS}
    )
    with anyio.fail_after(60):
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            listed = (await session.list_tools()).tools
    dumped = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in listed]
    return [
        {
            "name": d["name"],
            "description": d.get("description", ""),
            "inputSchema": d.get("inputSchema"),
        }
        for d in dumped
    ]


async def main() -> list[dict[str, object]]:
    catalog: list[dict[str, object]] = []
    for argv in SERVERS:
        name = os.path.basename(argv[0])
        tools = await list_tools(argv)
        print(f"{name}: {len(tools)} tools", file=sys.stderr)
        catalog.append({"server": name, "tools": tools})
    return catalog


if __name__ == "__main__":
    listed = anyio.run(main)
    with open(sys.argv[1], "w") as out:
        json.dump(listed, out, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
