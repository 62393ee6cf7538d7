"""Answer benchmark questions from a context with an LLM, and judge the answers with an LLM.

The judge prompts follow the published ones: LongMemEval's per-type prompts
(Wu et al., 2024, ``evaluate_qa.py``: temporal reasoning forgives off-by-one
day counts, knowledge updates accept the updated answer alongside older
information, preference questions are graded against a rubric, abstention
questions are correct when the model says it cannot answer) and the LoCoMo
J-score prompt (Mem0 / Zep evaluations: correct when the answer means the same
as the gold answer, generous on wording and date formats).  LoCoMo category-5
(adversarial) questions are graded like LongMemEval abstention.  The only
change is the reply format: JSON, since LLMClient asks for structured output.
"""
from __future__ import annotations

import pydantic

from pgmemory.eval.readers import Question
from pgmemory.providers.llm import LLMClient, Usage

ANSWER_PROMPT = """\
You answer a question about earlier conversations, using only the context below.
Give a short answer: a few words or one sentence. Where the context gives dates, resolve \
relative expressions ("last week", "yesterday") against them and answer with absolute dates. \
If the context does not contain the information the question asks for, say that the \
information is not available.

<CONTEXT>
{context}
</CONTEXT>
{current_date}
Question: {question}

Reply in JSON: {{"answer": "<your answer>"}}"""

_LME_DEFAULT = (
    "I will give you a question, a correct answer, and a response from a model. Please answer yes "
    "if the response contains the correct answer. Otherwise, answer no. If the response is "
    "equivalent to the correct answer or contains all the intermediate steps to get the correct "
    "answer, you should also answer yes. If the response only contains a subset of the information "
    "required by the answer, answer no."
)
_LME_TEMPORAL = _LME_DEFAULT + (
    " In addition, do not penalize off-by-one errors for the number of days. If the question asks "
    "for the number of days/weeks/months, etc., and the model makes off-by-one errors (e.g., "
    "predicting 19 days when the answer is 18), the model's response is still correct."
)
_LME_UPDATE = (
    "I will give you a question, a correct answer, and a response from a model. Please answer yes "
    "if the response contains the correct answer. Otherwise, answer no. If the response contains "
    "some previous information along with an updated answer, the response should be considered as "
    "correct as long as the updated answer is the required answer."
)
_LME_PREFERENCE = (
    "I will give you a question, a rubric for desired personalized response, and a response from a "
    "model. Please answer yes if the response satisfies the desired response. Otherwise, answer no. "
    "The model does not need to reflect all the points in the rubric. The response is correct as "
    "long as it recalls and utilizes the user's personal information correctly."
)
_ABSTENTION = (
    "I will give you an unanswerable question, an explanation, and a response from a model. Please "
    "answer yes if the model correctly identifies the question as unanswerable. The model could say "
    "that the information is incomplete, or some other information is given but the asked "
    "information is not."
)
_LOCOMO_JUDGE = (
    "Your task is to label an answer to a question as CORRECT or WRONG. You will be given a "
    "question (posed by one user to another user), a gold (ground truth) answer, and a generated "
    "answer to score. The point of the question is to ask about something one user should know "
    "about the other user based on their prior conversations. The gold answer is usually concise "
    "and names the referenced topic. Be generous with your grading: as long as the generated "
    "answer touches on the same topic as the gold answer, it is CORRECT. For time-related "
    "questions the gold answer is a specific date, month or year; the generated answer may be "
    "longer or use relative references (like 'last Tuesday' or 'next month'), but as long as it "
    "refers to the same date or time period as the gold answer it is CORRECT, even in another "
    "format (e.g. 'May 7th' vs '7 May')."
)
_YES_NO = '\n\nIs the model response correct? Reply in JSON: {"answer": "yes"} or {"answer": "no"}.'
_ABSTAIN_YES_NO = ('\n\nDoes the model correctly identify the question as unanswerable? '
                   'Reply in JSON: {"answer": "yes"} or {"answer": "no"}.')
_LOCOMO_REPLY = ('\n\nFirst give a one-sentence explanation, then the label. Reply in JSON: '
                 '{"explanation": "<one sentence>", "label": "CORRECT"} or {..., "label": "WRONG"}.')


class Answer(pydantic.BaseModel):
    """The model's answer to one question."""

    answer: str


class YesNo(pydantic.BaseModel):
    """A LongMemEval-style verdict."""

    answer: str


class Label(pydantic.BaseModel):
    """A LoCoMo J-score verdict."""

    explanation: str = ""
    label: str


def answer_prompt(question: Question, context: str) -> str:
    """The answer prompt for a question and a context (with the question's date when known)."""
    current = (f"Current date: {question.question_time.strftime('%Y-%m-%d %H:%M')} UTC\n"
               if question.question_time else "")
    return ANSWER_PROMPT.format(context=context, current_date=current, question=question.question)


def judge_prompt(benchmark: str, question: Question, response: str) -> str:
    """The judge prompt for a benchmark, a question (its type picks the prompt) and a response."""
    if question.adversarial:
        explanation = question.answer if benchmark == "longmemeval" else (
            "The conversations do not say this; an answer such as "
            f"{question.answer!r} is a trap built from facts about someone or something else.")
        return (f"{_ABSTENTION}\n\nQuestion: {question.question}\n\nExplanation: {explanation}"
                f"\n\nModel Response: {response}{_ABSTAIN_YES_NO}")
    if benchmark == "locomo":
        return (f"{_LOCOMO_JUDGE}\n\nQuestion: {question.question}\nGold answer: {question.answer}"
                f"\nGenerated answer: {response}{_LOCOMO_REPLY}")
    if question.category == "single-session-preference":
        return (f"{_LME_PREFERENCE}\n\nQuestion: {question.question}\n\nRubric: {question.answer}"
                f"\n\nModel Response: {response}{_YES_NO}")
    head = {"temporal-reasoning": _LME_TEMPORAL, "knowledge-update": _LME_UPDATE}.get(
        question.category, _LME_DEFAULT)
    return (f"{head}\n\nQuestion: {question.question}\n\nCorrect Answer: {question.answer}"
            f"\n\nModel Response: {response}{_YES_NO}")


async def answer(llm: LLMClient, question: Question, context: str, usage: Usage) -> str:
    """The model's short answer to the question from the context."""
    reply = await llm.complete([{"role": "user", "content": answer_prompt(question, context)}],
                               Answer, usage=usage)
    return reply.answer.strip()


async def judge(llm: LLMClient, benchmark: str, question: Question, response: str, usage: Usage) -> bool:
    """True when the judge accepts the response for this question."""
    messages = [{"role": "user", "content": judge_prompt(benchmark, question, response)}]
    if benchmark == "locomo" and not question.adversarial:
        verdict = await llm.complete(messages, Label, usage=usage)
        return verdict.label.strip().upper().startswith("CORRECT")
    reply = await llm.complete(messages, YesNo, usage=usage)
    return reply.answer.strip().lower().startswith("yes")

