"""``caramba generate MODEL_OR_RUN --prompt TEXT``: stream a language model's continuation;
``caramba chat MODEL``: a conversation with it, through its chat template."""

from __future__ import annotations

import sys

import typer


def register(app: typer.Typer) -> None:
    register_chat(app)

    @app.command("generate")
    def generate(
        model: str = typer.Argument(..., help="a Hugging Face folder (config.json + safetensors), or a run ID "
                                    "(prefix, latest) of a character-level text run such as examples/char_gpt.yml"),
        prompt: str = typer.Option(None, "--prompt", "-p", help="the text to continue"),
        tokens: str = typer.Option(None, "--tokens", help="the prompt as token IDs, comma-separated (prints IDs)"),
        max_new_tokens: int = typer.Option(None, "--max-new-tokens", "-n",
                                           help="tokens to generate (default 64, or what the model's context leaves)"),
        temperature: float = typer.Option(0.0, "--temperature", help="0: greedy (argmax); > 0: sample"),
        top_k: int = typer.Option(0, "--top-k", help="sample from the k most likely tokens (0: all)"),
        top_p: float = typer.Option(1.0, "--top-p", help="sample from the smallest set with this much probability"),
        min_p: float = typer.Option(0.0, "--min-p", help="drop tokens below this fraction of the top probability"),
        repetition_penalty: float = typer.Option(1.0, "--repetition-penalty", help="> 1 discourages tokens already seen"),
        seed: int = typer.Option(0, "--seed", help="seed of the sampling stream"),
        backend: str = typer.Option("cpu", "--backend", help="backend spec (cpu, xla, ...)"),
        capacity: int = typer.Option(None, "--capacity", help="KV-cache positions (default: prompt + new tokens)"),
        dtype: str = typer.Option("float32", "--dtype", help="parameter dtype of a Hugging Face checkpoint"),
        store: str = typer.Option(None, "--store", help="run store folder (default: the `store` setting)"),
        config: str = typer.Option(None, "--config", help="config file (default: ./caramba.yml, then ~/.caramba/config.yml)"),
    ) -> None:
        """Continue a prompt with a causal language model, streaming tokens as they come
        (KV cache resident on the backend; Ctrl-C stops)."""
        from caramba.errors import ConfigError
        from caramba.generate import Sampler, model_context
        from caramba.generate.source import open_model

        if (prompt is None) == (tokens is None):
            raise ConfigError("give the prompt as --prompt TEXT or as --tokens 1,2,3 (one of them)")
        sampler = Sampler(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                          repetition_penalty=repetition_penalty)
        make, tok, prep = open_model(model, backend=backend, dtype=dtype, store=store, config=config,
                                     text=prompt is not None)
        eos = tok.eos_id if tok is not None else None
        if tok is not None:
            ids = tok.encode(prompt)
        else:
            try:
                ids = [int(x) for x in tokens.replace(" ", "").split(",") if x]
            except ValueError:
                raise ConfigError(f"--tokens takes comma-separated integers, got {tokens!r}") from None
        if not ids:
            raise ConfigError("the prompt is empty")
        n = max_new_tokens if max_new_tokens is not None else 64
        limit = model_context(prep)  # a learned position table (GPT) bounds prompt + new tokens
        if max_new_tokens is None and limit is not None and capacity is None and len(ids) + n - 1 > limit:
            n = max(limit - len(ids) + 1, 1)
            typer.echo(f"(generating {n} tokens: the model has {limit} positions)", err=True)
        out = sys.stdout
        try:  # Ctrl-C anywhere from compiling to the last token: a newline and exit code 130
            with make(capacity if capacity is not None else len(ids) + n - 1) as gen:
                stream = gen.generate([ids], n, eos_id=eos, sampler=sampler, seed=seed)
                decoder = tok.stream() if tok is not None else None
                for step in stream:
                    t = int(step[0])
                    if t < 0:
                        break
                    out.write(decoder.push(t) if decoder is not None else f"{t} ")
                    out.flush()
                if decoder is not None:
                    out.write(decoder.flush())
            out.write("\n")
            out.flush()
        except KeyboardInterrupt:
            out.write("\n")
            out.flush()
            raise typer.Exit(130) from None


def register_chat(app: typer.Typer) -> None:
    @app.command("chat")
    def chat(
        model: str = typer.Argument(..., help="a Hugging Face folder with a tokenizer (tokenizer.json; a chat "
                                    "template in tokenizer_config.json or chat_template.jinja is used when present)"),
        system: str = typer.Option(None, "--system", help="a system message that opens the conversation"),
        max_new_tokens: int = typer.Option(256, "--max-new-tokens", "-n", help="most tokens per reply"),
        temperature: float = typer.Option(0.7, "--temperature", help="0: greedy (argmax); > 0: sample"),
        top_k: int = typer.Option(0, "--top-k", help="sample from the k most likely tokens (0: all)"),
        top_p: float = typer.Option(0.95, "--top-p", help="sample from the smallest set with this much probability"),
        min_p: float = typer.Option(0.0, "--min-p", help="drop tokens below this fraction of the top probability"),
        repetition_penalty: float = typer.Option(1.0, "--repetition-penalty", help="> 1 discourages tokens already seen"),
        seed: int = typer.Option(0, "--seed", help="seed of the sampling stream (turn t uses seed + t)"),
        backend: str = typer.Option("cpu", "--backend", help="backend spec (cpu, xla, ...)"),
        capacity: int = typer.Option(2048, "--capacity", help="KV-cache positions: the whole conversation must fit"),
        dtype: str = typer.Option("float32", "--dtype", help="parameter dtype of the checkpoint"),
    ) -> None:
        """Talk with a model: each line you type is a user turn; the reply streams as it comes.
        Ctrl-C stops a reply (the conversation goes on); Ctrl-D or an empty input stream ends it."""
        from caramba.errors import ConfigError
        from caramba.generate import Sampler, is_checkpoint_folder
        from caramba.generate.source import open_model
        from caramba.text.chat import chat_prompt

        if not is_checkpoint_folder(model):
            raise ConfigError(f"{model} is not a Hugging Face folder (config.json + safetensors); chat needs one "
                              "with its tokenizer", hint="for a character-level run use caramba generate RUN --prompt")
        sampler = Sampler(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                          repetition_penalty=repetition_penalty)
        make, tok, _ = open_model(model, backend=backend, dtype=dtype, store=None, config=None, text=True)
        messages = [{"role": "system", "content": system}] if system else []
        out = sys.stdout
        with make(capacity) as gen:
            turn = 0
            while True:
                try:
                    line = input("you> ")
                except (EOFError, KeyboardInterrupt):
                    out.write("\n")
                    return
                if not line.strip():
                    continue
                messages.append({"role": "user", "content": line})
                ids = tok.encode(chat_prompt(tok, messages))
                n = min(max_new_tokens, capacity - len(ids) + 1)
                if n < 1:
                    raise ConfigError(f"the conversation ({len(ids)} tokens) no longer fits the cache of {capacity} "
                                      "positions", hint="start a new chat, or raise --capacity")
                decoder = tok.stream(skip_special_tokens=True)
                reply: list[str] = []
                out.write("model> ")
                try:
                    for step in gen.generate([ids], n, eos_id=tok.eos_id, sampler=sampler, seed=seed + turn):
                        t = int(step[0])
                        if t < 0:
                            break
                        reply.append(decoder.push(t))
                        out.write(reply[-1])
                        out.flush()
                except KeyboardInterrupt:  # stop this reply; keep what came
                    pass
                reply.append(decoder.flush())
                out.write(reply[-1] + "\n")
                out.flush()
                messages.append({"role": "assistant", "content": "".join(reply).strip()})
                turn += 1
