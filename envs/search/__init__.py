"""Search envs: answer questions by searching a corpus (Search-R1's protocol).

    env = skyhub.make("search-qa")                        # bundled corpus + 50 questions
    env = skyhub.make("search-qa", corpus="wiki.jsonl", qa="nq_test.parquet")
    env = skyhub.make("search-qa", index="idx/", qa=...)   # from 'skyhub search index build'
    env = skyhub.make("search-qa", retriever_url="http://127.0.0.1:8000/retrieve", qa=...)

Registration only: bm25s is imported when an env is made.
"""

from skyhub.registry import register

register("search-qa", "skyhub.envs.search.env:SearchEnv",
         description="Search a corpus with <search>, answer in <answer>; exact-match reward.",
         tags=("search", "multi-turn", "tool-use", "offline"))
