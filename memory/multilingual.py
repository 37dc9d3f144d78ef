"""The prefilter's multilingual word rules: orders to the reader in eight languages, refused at the door.

``memory.prefilter``'s English rules read English.  The same order in French,
German, Spanish, Portuguese, Russian, Chinese or Japanese passed them, and the
semantic layer (``memory.semantic``, run after a claim is embedded) caught only
two in three of those.  These rules read the *grammar of an order* in each
language -- forms that exist only to address a reader -- so they are cheap,
run before anything is stored, and each refusal names the rule that fired
(``fr.imperative``, ``zh.conditional``, ...):

``<lang>.injection``
    "forget / ignore the rules (instructions, prompt, guidelines) you were
    given" with an imperative verb, and "your previous instructions no longer
    apply / are void".
``<lang>.imperative``
    A sentence, or a part after a label (``ATTENTION :``, ``【运维】``,
    ``Nota -``), that *opens with an imperative*: ``Envoyez ...``,
    ``Löschen Sie ...``, ``Manda ...``, ``Отключите ...``, ``把密钥发到...``,
    or that *ends* with one in Japanese (``...してください``, ``...しろ``,
    ``...すること``).  Negative imperatives (``Ne supprime pas``, ``No borres``,
    ``Не удаляй``, ``不要``) and "let's" forms (``Lass uns``, ``Давай``) too.
``<lang>.you_must``
    A modal aimed at the reader: ``tu dois``, ``Sie sollten``, ``deberías``,
    ``você deve``, ``ты должен`` / ``тебе стоит``, ``你应该``, ``あなたは...べき``;
    and polite requests (``Pourriez-vous``, ``Könnten Sie``, ``¿Podrías``,
    ``Не могли бы вы``, ``能不能``, ``...てもらえますか``).
``<lang>.conditional``
    "if anyone asks about X, answer Y" -- a sentence with a condition about
    someone asking, whose consequence opens with an imperative or tells the
    reader what the asker is *to be told* (the passive "whoever asks should
    hear ...").

A refusal whose verb sends something out (send, mail, paste, upload, copy,
print, include ...) is described as an exfiltration request; the rule
(``directive``) is the same.

How it reads text:

* as :func:`memory.lookalikes.judge` reads it (NFKC, invisible characters
  removed, accents and look-alikes folded), lower-cased first; the word lists
  below are folded the same way when they are compiled, so a Cyrillic ``а``
  in ``Забудь`` or a missing accent changes nothing;
* commands in backquotes are facts mentioned, not orders: they are blanked;
* a quotation that the sentence attributes to someone (``the mail said
  "..."``, ``Le faux recruteur a écrit : « ... »``, ``「...」と書かれていた``)
  is reported speech, and is blanked; a text that is *only* a quotation, or
  a quotation behind a label, is judged as if unquoted.

Limits (docs/MEMORY.md): an order phrased as a statement about a third party
("the release manager merges without review") reads as a fact; Spanish and
Portuguese drop their subjects, so a sentence opening with a bare verb from
the lists is read as an order even where a person would read "it sends ...";
a quotation attributed with a reporting word passes these rules whatever it
says (the semantic layer still reads it).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Final, NamedTuple

from memory.lookalikes import judge


class Finding(NamedTuple):
    """Which rule fired and the shape it found (never the text)."""

    rule: str  # the prefilter rule: injection or directive
    name: str  # this module's rule: <lang>.<kind>
    detail: str


_LANG_NAMES: Final = {
    "en": "English", "fr": "French", "de": "German", "es": "Spanish", "pt": "Portuguese",
    "ru": "Russian", "zh": "Chinese", "ja": "Japanese",
}


def _alt(words: str) -> str:
    """A regex alternation of whitespace-separated words (``_`` stands for a space), longest first."""
    items = sorted({w.replace("_", " ") for w in words.split()}, key=len, reverse=True)
    return "(?:" + "|".join(re.escape(w) if not w.startswith("re:") else w[3:] for w in items) + ")"


# -- per-language vocabulary ----------------------------------------------------
#
# Written in each language's own spelling; folded by judge() when compiled.

#: Nouns for what an injection tells the reader to drop.
_RULES_NOUNS: Final = {
    "en": "instructions instruction rules guidelines guidance guardrails prompt configuration restrictions policy orders constraints setup settings",
    "fr": "instructions consignes règles directives ordres prompt configuration restrictions garde-fous politique contraintes réglages paramètres",
    "de": "anweisungen anweisung regeln vorgaben richtlinien befehle prompt konfiguration einschränkungen beschränkungen schutzmaßnahmen vorschriften",
    "es": "instrucciones reglas normas órdenes indicaciones directrices prompt configuración restricciones políticas salvaguardas ajustes",
    "pt": "instruções regras ordens diretrizes orientações prompt configuração configurações restrições políticas salvaguardas ajustes",
    "ru": "инструкции инструкций инструкциям правила правил правилам указания указаний приказы приказов директивы промпт настройки ограничения ограничений установки",
    "zh": "指令 指示 规则 命令 提示词 提示 设定 限制 约束 规定 配置 要求 政策 说明 设置",
    "ja": "指示 ルール 規則 命令 プロンプト 制限 設定 制約 ポリシー ガイドライン 説明 指針",
}
#: Imperatives of "forget / ignore / set aside" (injection verbs).
_DROP: Final = {
    "en": "forget ignore disregard drop discard abandon",
    "fr": "oublie oubliez ignore ignorez néglige négligez abandonne abandonnez re:fais\\s+abstraction re:faites\\s+abstraction re:mets\\s+de\\s+c[oô]t[eé] re:mettez\\s+de\\s+c[oô]t[eé] re:ne\\s+tiens\\s+(?:plus\\s+)?compte re:ne\\s+tenez\\s+(?:plus\\s+)?compte",
    "de": "vergiss vergessen_sie ignoriere ignorieren_sie missachte missachten_sie verwirf verwerfen_sie re:setz\\w*\\s+\\w+\\s+au(?:ß|ss)er\\s+kraft",
    "es": "olvida olvide olvidad ignora ignore ignorad descarta descarte omite omita re:haz\\s+caso\\s+omiso re:haga\\s+caso\\s+omiso re:deja\\s+de\\s+lado re:deje\\s+de\\s+lado",
    "pt": "esqueça esquece esqueçam ignore ignora ignorem desconsidere desconsidera descarte descarta re:deixe\\s+de\\s+lado re:deixa\\s+de\\s+lado",
    "ru": "отложи отложите забудь забудьте игнорируй игнорируйте проигнорируй проигнорируйте отбрось отбросьте отмени отмените re:не\\s+обращай(?:те)?\\s+внимания",
    "zh": "",
    "ja": "",
}
#: "... no longer apply / are void / expired / replaced" after the rules noun.
_VOID: Final = {
    "en": r"(?:no\s+longer\s+(?:apply|applies|count|valid|matter)|(?:are|is)\s+(?:now\s+)?(?:void|obsolete|cancelled|canceled|revoked|expired|outdated|superseded|replaced)|have\s+expired)",
    "fr": r"(?:ne\s+(?:comptent|compte|s'appliquent|s'applique|valent|vaut|sont|est)\s+plus|sont\s+(?:caduques|annulées|obsolètes|périmées|remplacées|nulles)|est\s+(?:caduque|annulée|obsolète|remplacée|nulle))",
    "de": r"(?:gelten\s+nicht\s+mehr|gilt\s+nicht\s+mehr|sind\s+(?:ungültig|aufgehoben|hinfällig|veraltet|ersetzt|abgelaufen|nichtig)|ist\s+(?:ungültig|aufgehoben|hinfällig|veraltet|ersetzt|abgelaufen|nichtig))",
    "es": r"(?:ya\s+no\s+(?:valen|vale|cuentan|cuenta|aplican|aplica|rigen|rige|son\s+válidas)|(?:son|están|quedan)\s+(?:nulas|anuladas|obsoletas|caducadas|sustituidas|reemplazadas|revocadas)|han\s+caducado|(?:está|queda)\s+(?:anulada|obsoleta|caducada|sustituida|reemplazada))",
    "pt": r"(?:não\s+(?:valem|vale|contam|conta|se\s+aplicam|se\s+aplica)\s+mais|(?:são|estão|ficam)\s+(?:nulas|anuladas|obsoletas|vencidas|substituídas|revogadas)|(?:está|fica)\s+(?:anulada|obsoleta|vencida|substituída|revogada)|expiraram)",
    "ru": r"(?:больше\s+не\s+(?:действуют|действует|применяются|применяется|актуальны|актуальна|считаются)|(?:отменены|аннулированы|недействительны|устарели|утратили\s+силу|заменены|истекли))",
    "zh": r"(?:作废|失效|无效|不再有效|不再适用|过期|被取代|被替换|被撤销)",
    "ja": r"(?:無効|失効|破棄|取り消|撤回|置き換え)",
}
#: Words that make the reader the owner of the dropped rules ("your", "previous", "above").
_OWNER: Final = {
    "en": "your previous prior earlier above original all any every system",
    "fr": "tes tous toutes vos précédentes précédents antérieures antérieurs ci-dessus initiales originales avant auparavant reçues données système",
    "de": "deine deinen ihre alle bisherigen vorherigen früheren obigen ursprünglichen vorher bekommen erhalten system",
    "es": "tus todas todos sus previas anteriores originales antes recibiste dieron configuraron sistema",
    "pt": "suas seus todas todos anteriores prévias originais antes recebeu deram configurado sistema",
    "ru": "твои ваши все всех всем прежние предыдущие ранее раньше выше исходные полученные тебя вас системы системные",
    "zh": "",
    "ja": "",
}

#: "New orders replace the old ones", "you no longer follow any policy": the reader released from its rules.
_RELEASED: Final = {
    "en": r"\b(?:everything|anything|all|whatever)\b[^.!?;]{0,40}?\b(?:above|before|preceding|earlier|prior)\b[^.!?;]{0,50}?\b(?:is|are)\s+(?:now\s+)?(?:void|cancell?ed|null|revoked|obsolete|invalid|withdrawn|irrelevant)\b|\b(?:put|set|lay|leave)\b[^.!?;]{0,50}?\baside\b|\bnew\s+{nouns}\s+(?:replace|supersede|override|overrule)|\byou\s+(?:no\s+longer|don't|do\s+not|never)\s+(?:need\s+to\s+|have\s+to\s+)?(?:follow|obey|respect|apply)\b",
    "fr": r"\b(?:tout|tous|toutes)\b[^.!?;]{0,40}?(?:précède|précèdent|ci-dessus|au-dessus|avant)\b[^.!?;]{0,50}?\b(?:est|sont)\s+(?:désormais\s+)?(?:annul|caduc|nul|obsolète|révoqu|invalid)|\bnouve(?:lles|aux)\s+{nouns}\s+(?:remplacent|annulent|priment)|\btu\s+n'(?:obéis|suis|appliques|respectes)\s+plus\b|\bvous\s+n'(?:obéissez|suivez|appliquez|respectez)\s+plus\b",
    "de": r"\b(?:alles|alle|sämtliche)\b[^.!?;]{0,40}?\b(?:über|oben|vorher|zuvor|davor|vorigen|vorangehenden)\b[^.!?;]{0,50}?\b(?:ist|sind)\s+(?:ab\s+jetzt\s+|nun\s+|jetzt\s+)?(?:aufgehoben|ungültig|nichtig|hinfällig|gestrichen|widerrufen|erledigt)|\blass\w*\s+[^.!?;]{0,50}?\bbeiseite\b|\bneue\s+{nouns}\s+(?:ersetzen|überschreiben|heben)|\bgilt\s+keine\s+\w+\s+mehr\b|\bgelten\s+keine\s+\w+\s+mehr\b|\bdu\s+(?:befolgst|folgst|beachtest)\s+(?:\w+\s+)?(?:keine|nicht\s+mehr)\b",
    "es": r"\b(?:todo|todas|todos)\b[^.!?;]{0,40}?\b(?:anterior|anteriores|arriba|antes)\b[^.!?;]{0,50}?\b(?:queda|quedan|está|están|es|son)\s+(?:anulad|revocad|sin\s+efecto|invalidad|cancelad)|\bnuevas\s+{nouns}\s+(?:sustituyen|reemplazan|anulan)|\bya\s+no\s+(?:sigues|obedeces|respetas|cumples|tienes\s+que\s+seguir|debes\s+seguir)\b",
    "pt": r"\b(?:tudo|todas|todos)\b[^.!?;]{0,40}?\b(?:acima|anterior|anteriores|antes)\b[^.!?;]{0,50}?\b(?:fica|ficam|está|estão|é|são)\s+(?:anulad|revogad|sem\s+efeito|invalidad|cancelad)|\bnovas\s+{nouns}\s+(?:substituem|anulam)|\b(?:você|voce)\s+(?:já\s+)?não\s+(?:segue|obedece|respeita|cumpre|precisa\s+seguir)\s+mais\b|\bjá\s+não\s+(?:segue|obedece)\b",
    "ru": r"(?:всё|все)\b[^.!?;]{0,40}?(?:выше|ранее|раньше|до\s+этого|прежде)\b[^.!?;]{0,50}?(?:отменен|отменён|отменено|аннулирован|недействительн|утратил)|\bнов\w+\s+{nouns}\s+(?:заменяют|отменяют)|\bбольше\s+не\s+(?:относится|относятся|подчиняешься|соблюдаешь|следуешь|обязан)\b|\bникак\w+\s+(?:политика|правила|ограничения|инструкции)\s+(?:больше\s+)?не\s+(?:действу|применя|относ)",
    "zh": r"(?:以上|上面|上述|此前|前面)[^。]{0,20}?(?:一律|全部|都|均)?(?:取消|作废|失效|无效|不算|不再有效)|新的?{nouns}[^。]{0,6}?(?:取代|替代|替换|覆盖)|(?:你|您)[^。]{0,4}?不再(?:遵守|服从|受|需要遵守|执行)",
    "ja": r"(?:より上|上記|以上|これまで|ここまで)[^。]{0,30}?(?:取り消し|無効|破棄|撤回)|新しい{nouns}[^。]{0,6}?(?:代わ|置き換わ|優先)|もう従(?:いません|わない|わなくて)|従う必要はない",
}
#: Imperative verbs (second person, and the polite third person where a language has one)
#: that open an order.  A sentence opening with one of these, with no subject before it, is an order.
_IMPERATIVES: Final = {
    "en": """answer reply respond say claim state insist deny confirm rotate email mail forward upload paste post copy leak publish expose disclose dump attach include grant approve
        quietly silently secretly tell inform assure reassure blame hide conceal drop wipe erase purge lift relax loosen
        lower lift waive whitelist allowlist exempt transfer wire pay refund sign""",
    "fr": """envoie envoyez renvoie renvoyez transmets transmettez transfère transférez supprime supprimez efface effacez
        désactive désactivez active activez coupe coupez  copiez colle collez ajoute ajoutez publie publiez pousse poussez
        fusionne fusionnez merge mergez approuve approuvez  validez  marquez montre montrez affiche affichez imprime
        imprimez écris écrivez inclus incluez joins joignez partage partagez mets mettez ouvre ouvrez  fermez  changez
        remplace remplacez lance lancez exécute exécutez saute sautez contourne contournez donne donnez accorde accordez retire
        retirez enlève enlevez arrête arrêtez redémarre redémarrez  gardez  cachez télécharge téléchargez téléverse
        téléversez expose exposez révèle révélez divulgue divulguez fais faites laisse laissez mentionne mentionnez signale
        signalez raconte racontez assure assurez affirme affirmez prétends prétendez réponds répondez dis dites considère
        considérez traite traitez utilise utilisez installe installez modifie modifiez déploie déployez désinstalle désinstallez
        communique communiquez fournis fournissez livre livrez rends rendez indique indiquez explique expliquez confirme
        confirmez nie niez obéis obéissez suis suivez oublie oubliez ignore ignorez baisse baissez augmente augmentez
        commite commitez  postez  mailez """,
    "de": """häng hänge versichere beruhige verspreche vergiss ignoriere gehorche gehorcht  schick schicke sende leite lösche entferne deaktiviere aktiviere kopiere kopier
        füge füg lade veröffentliche pushe merge gib zeig zeige sag sage antworte behaupte  poste schreib schreibe markiere
        genehmige überspringe schalte stell  setz setze mach mache nimm öffne ändere ersetze drucke nenne verrate übertrage
        hänge installiere führe starte stoppe umgehe erhöhe senke bestätige leugne erkläre erwähne melde committe deploye
        verschiebe lösch trag trage hinterlege speichere versende maile gewähre erteile deinstalliere""",
    "es": """envía envíe enviad manda mande mandad reenvía reenvíe borra borre elimina elimine desactiva desactive activa active
        copia copie pega pegue sube suba publica publique comparte comparta ignora ignore olvida olvide obedece obedezca
        responde responda di diga contesta conteste afirma afirme asegura asegure añade añada agrega agregue quita quite
        salta salte sáltate omite omita aprueba apruebe fusiona fusione marca marque  muestre imprime imprima escribe
        escriba  incluya pon ponga haz haga da dé revela revele cambia cambie reemplaza reemplace instala instale
        desinstala desinstale  ejecute  lance  abra  cierre apaga apague  deje  trate  use
        descarga descargue transfiere transfiera otorga otorgue concede conceda  cuente explica explique confirma
        confirme niega niegue menciona mencione informa informe comunica comunique entrega entregue guarda guarde oculta
        oculte adjunta adjunte filtra filtre expón exponga  siga""",
    "pt": """envie envia mande manda encaminhe encaminha apague apaga exclua exclui delete remova remove desative desativa ative
        ativa copie copia cole cola suba sobe publique publica compartilhe compartilha ignore ignora esqueça esquece obedeça
        obedece responda responde diga diz conte  afirme afirma garanta garante adicione adiciona tire  pule pula
        aprove aprova faça  mescle mescla marque  mostre  imprima  escreva  inclua 
        coloque  ponha põe dê  revele revela mude  troque  substitua substitui instale instala desinstale
        execute  rode  abra  feche  desligue desliga deixe  trate  use  baixe 
        transfira transfere conceda concede explique explica confirme confirma negue nega mencione menciona informe
         comunique  entregue  guarde  esconda  anexe  vaze vaza exponha siga""",
    "ru": """уверь успокой отвечай обещай забудь игнорируй проигнорируй подчиняйся слушайся отключи выключи включи удали сотри отправь пришли перешли скинь
        вышли загрузи залей выложи опубликуй вставь скопируй добавь убери сними пропусти обойди одобри смёрджи смерджи влей
        запушь закоммить отметь пометь покажи выведи распечатай напечатай напиши дай выдай предоставь раскрой открой закрой
        поменяй измени замени установи запусти останови перезапусти скажи ответь говори сообщи передай расскажи объясни
        подтверди отрицай утверждай уверяй заверь сделай делай оставь считай используй повысь понизь сохрани спрячь поставь
        приложи укажи упомяни храни держи слей отдай покажи""",
    "zh": "",
    "ja": "",
}
#: English verbs are nouns too ("Email delivery is slow"): an order has an object after its verb.
_EN_OBJECTS: Final = "the a an all any this that these those it them your every each no my our its their only both everything anything nothing me us"
#: Negative imperatives opening a sentence ("don't ..."): the word after the negation.
_NEGATIONS: Final = {
    "fr": r"(?:ne|n')\s*\w+\s+(?:pas|jamais|plus|rien)\b|ne\s+pas\b",
    "de": r"nicht\s+\w+\s*!",
    "es": r"no\s+(?:\w+(?:es|as|éis|áis))\b",
    "pt": r"não\s+(?:{imp})\b",
    "ru": r"не\s+(?:\w+(?:йте|ите|ьте)|удаляй|говори|трогай|проверяй|рассказывай|сообщай|показывай|отвечай|упоминай|используй|доверяй|обращай|давай|пиши|ставь|отправляй|публикуй|делай)\b",
}
#: Openers that ask politely or say "let's".
_POLITE: Final = {
    "en": r"(?:would|could|can|will)\s+you\s+(?:kindly\s+|please\s+|quietly\s+|just\s+)?\w+|let'?s\b|let\s+us\b",
    "fr": r"(?:pourrais|pourriez|peux|pouvez|voudrais|voudriez|voulez|veux|aurais|auriez)[\s-]+(?:tu|vous)\b|(?:\w+ons)\s+(?:le|la|les|l'|ce|cette|ces|un|une|des|tout|toutes|tous|du|au|nos|notre)\b",
    "de": r"(?:könntest|kannst|würdest|wirst|könnten|können|würden|werden)\s+(?:du|sie)\b|lass(?:t)?\s+uns\b|\w+en\s+sie\b",
    "es": r"(?:podrías|puedes|podría|podrían|pueden|harías|te\s+importaría|le\s+importaría|serías|sería)\b|vamos\s+a\s+\w+r\b|\w{3,}(?:émonos|ámonos)\b",
    "pt": r"(?:você|voce|vocês|tu)\s+(?:poderia|pode|podia|consegue|conseguiria|poderiam|podem)\b|(?:poderia|pode|podia|consegue)\s+(?:me\s+)?\w+r\b|vamos\s+\w+r\b",
    "zh": r"(?:能不能|能否|可不可以|可否|麻烦你|麻烦您|劳驾|你能|您能|你可以|您可以|你可不可以|你帮我|您帮我|帮我|帮忙)",
    "ru": r"(?:не\s+)?(?:могли\s+бы|мог\s+бы|могла\s+бы)\s+(?:вы|ты)\b|(?:можешь|можете|сможешь|сможете)\b|будь(?:те)?\s+(?:добр|добры|любезн)\w*|давай(?:те)?\b",
}
#: A modal aimed at the reader, anywhere in a sentence.
_YOU_MUST: Final = {
    "en": r"\byou\s+(?:ought\s+to|had\s+better|better|are\s+expected\s+to|are\s+supposed\s+to)\b",
    "fr": r"\b(?:tu|vous)\s+(?:dois|doit|devez|devrais|devriez|devras|devrez|as\s+à|avez\s+à|es\s+prié|êtes\s+prié|es\s+tenu|êtes\s+tenu)\b|\bil\s+(?:faut|faudra|faudrait)\s+que\s+(?:tu|vous)\b|\bil\s+te\s+faut\b|\bil\s+vous\s+faut\b",
    "de": r"\b(?:du|ihr)\s+(?:musst|müsst|solltest|solltet|sollst|sollt|hast\s+\w+\s+zu|darfst\s+nicht)\b|\bsie\s+(?:müssen|sollten|sollen)\s+(?:\w+\s+){0,6}?\w+(?:en|ern|eln)\s*[.!]?$",
    "es": r"\b(?:debes|deberías|debería\s+usted|deberá\s+usted|usted\s+debe|ustedes\s+deben|tienes\s+que|tendrás\s+que|has\s+de|te\s+toca|necesitas|te\s+conviene)\b",
    "pt": r"\b(?:você|voce|vocês|tu)\s+(?:deve|deveria|devem|deveriam|deves|precisa|precisam|precisas|tem\s+que|tem\s+de|têm\s+que|tens\s+de|tens\s+que|vai\s+ter\s+que)\b",
    "ru": r"\b(?:ты|вы)\s+(?:должен|должна|должны|обязан|обязана|обязаны)\b|\b(?:тебе|вам)\s+(?:нужно|надо|следует|стоит|придётся|придется|необходимо|нельзя)\b",
    "zh": r"我们[^。,]{0,20}?吧|(?:你|您|你们)[^。,]{0,6}?(?:必须|应该|应当|需要|得|要|务必|一定要|不要|别|不许|不能|不准|该|最好)",
    "ja": r"(?:あなた|君|きみ|お前|おまえ)(?:は|が|も|たち)?[^。!?]{0,60}?(?:べき|なければ|なくては|ねばならない|必要があ|ないといけない|ないとだめ)",
}
#: The reader re-cast ("from this message on you are ..."), given a task ("your task is ...") or
#: a wish ("I want you to ..."): orders without an imperative.
_RECAST: Final = {
    "en": r"\b(?:from\s+(?:now|this\s+(?:message|point|moment))\s+on|starting\s+now|henceforth)\b[^.!?;]{0,20}?\byou\s+(?:are|will\s+be|act)\b|\bi\s+(?:want|need|would\s+like|expect|require)\s+you\s+to\b|\byour\s+(?:task|job|role|mission|duty|only\s+task|new\s+task)\b[^.!?;]{0,30}?\bis\s+to\b",
    "fr": r"(?:à\s+partir\s+de|dès)\s+(?:maintenant|ce\s+message|cet\s+instant|à\s+présent)[^.!?;]{0,20}?\b(?:tu\s+es|vous\s+êtes)\b|\bdésormais,?\s+(?:tu\s+es|vous\s+êtes)\b|\b(?:tu\s+es|vous\s+êtes)\s+(?:maintenant|désormais)\b|\bje\s+(?:veux|voudrais|souhaite|demande|exige)\s+que\s+(?:tu|vous)\b|\b(?:ta|votre)\s+(?:tâche|mission|rôle|travail|seule\s+tâche)\b[^.!?;]{0,30}?\best\s+(?:de|d')",
    "de": r"\b(?:ab|von)\s+(?:jetzt|sofort|dieser\s+nachricht|nun|heute)\b[^.!?;]{0,20}?\bbist\s+du\b|\bdu\s+bist\s+(?:jetzt|ab\s+jetzt|nun|ab\s+sofort)\b|\bich\s+(?:will|möchte|brauche|erwarte|verlange)\s*,?\s+dass\s+(?:du|sie)\b|\b(?:deine|ihre)\s+(?:aufgabe|rolle|mission|pflicht|einzige\s+aufgabe)\s+ist\b",
    "es": r"\b(?:a\s+partir\s+de|desde)\s+(?:ahora|este\s+mensaje|este\s+momento|hoy)\b[^.!?;]{0,20}?\b(?:eres|usted\s+es)\b|\bahora\s+eres\b|\b(?:quiero|necesito|exijo|me\s+gustaría)\s+que\s+(?!el\b|la\b|los\b|las\b)|\btu\s+(?:tarea|misión|trabajo|función|única\s+tarea)\b[^.!?;]{0,30}?\bes\b",
    "pt": r"\b(?:a\s+partir\s+(?:de\s+)?|desde\s+)(?:agora|esta|desta|deste|este|hoje)\b[^.!?;]{0,20}?\b(?:você\s+é|tu\s+és)\b|\bagora\s+você\s+é\b|\b(?:quero|preciso|exijo)\s+que\s+(?:você|tu)\b|\b(?:sua|tua)\s+(?:tarefa|missão|função|única\s+tarefa)\b[^.!?;]{0,30}?\bé\b",
    "ru": r"(?:с\s+этого\s+(?:момента|сообщения|дня)|отныне)[^.!?;]{0,20}?(?:ты|вы)\b|\bтеперь\s+ты\s+(?:—|-)|\bя\s+(?:хочу|прошу|требую),?\s+чтобы\s+(?:ты|вы)\b|\b(?:твоя|ваша)\s+(?:задача|миссия|роль|работа|единственная\s+задача)\b",
    "zh": r"从(?:现在|这条消息|此刻|今天|本条消息)(?:起|开始)[^。]{0,10}?你|你现在是|我(?:要|想要|希望|需要|命令|请求)你|你(?:现在|今后|以后)?的(?:任务|工作|职责|使命)是",
    "ja": r"(?:以降|これから|今から|今後)[^。]{0,10}?(?:あなた|君|きみ)は|(?:あなた|君|きみ|お前)の(?:任務|仕事|役割|使命)は",
}
#: A second person saying: "..., you reply that ...", the consequence of a condition.
_YOU_SAY: Final = {
    "en": r"\byou\s+(?:reply|answer|say|tell|respond|claim|state|insist)\b",
    "fr": r"\b(?:tu|vous)\s+(?:réponds|répondez|dis|dites|affirmes|affirmez|expliques|expliquez|racontes|indiques|indiquez)\b",
    "de": r"\b(?:antwortest|sagst|erklärst|behauptest|erzählst|versicherst)\s+du\b|\bdu\s+(?:antwortest|sagst|erklärst|behauptest|erzählst)\b",
    "es": r"\b(?:contestas|respondes|dices|afirmas|explicas|aseguras|le\s+dices|les\s+dices)\b",
    "pt": r"\b(?:você|tu)\s+(?:responde|respondes|diz|dizes|afirma|explica|garante)\b",
    "ru": r"\b(?:ты|вы)\s+(?:отвечаешь|отвечаете|говоришь|говорите|сообщаешь|сообщаете|утверждаешь|объясняешь)\b",
}
#: "If / when / whoever" words that open a condition about someone asking.
_IF: Final = {
    "en": r"\b(?:if|when|whenever|any|every|each|all|whoever|those|people|someone|somebody|anyone|anybody|everyone|everybody)\b",
    "fr": r"\b(?:si|quand|lorsque|lorsqu|chaque\s+fois\s+que|chaque\s+fois\s+qu|dès\s+que|dès\s+qu|au\s+cas\s+où|quiconque|toute\s+personne\s+qui|tout\w*\s+\w+\s+qui|chaque\s+\w+\s+qui|tous\s+ceux\s+qui|celui\s+qui|ceux\s+qui)\b",
    "de": r"\b(?:wenn|falls|sobald|sollte|immer\s+wenn|jedes\s+mal\s+wenn|wer|wer\s+auch\s+immer|jeder,?\s+der|alle,?\s+die|jede[mnrs]?\s+\w+,?\s+(?:der|die|das))\b",
    "es": r"\b(?:si|cuando|cada\s+vez\s+que|siempre\s+que|en\s+cuanto|en\s+caso\s+de\s+que|quien|quienes|quienquiera|todo\s+el\s+que|cualquiera\s+que|cualquier\s+\w+\s+que|todo\s+\w+\s+que|a\s+quien|al\s+que)\b",
    "pt": r"\b(?:se|quando|sempre\s+que|toda\s+vez\s+que|assim\s+que|caso|quem|quem\s+quer\s+que|qualquer\s+pessoa\s+que|qualquer\s+\w+\s+que|todo\s+\w+\s+que|todo\s+mundo\s+que)\b",
    "ru": r"(?:^|\s)(?:если|когда|как\s+только|каждый\s+раз,?\s+когда|всякий\s+раз,?\s+когда|всем,?\s+кто|каждому,?\s+кто|тем,?\s+кто|кто\s+бы|любому,?\s+кто|тому,?\s+кто|(?:любому|каждому|любой|каждый)\s+\w+,?\s+который)(?:\s|,)",
}
#: "asks / mentions / questions".
_ASK: Final = {
    "en": r"\b(?:ask|question|raises|brings\s+up|mentions|wants\s+to\s+know|inquires|enquires)",
    "fr": r"\b(?:demande|demandent|demandera|interroge|interrogent|questionne|questionnent|pose|posent|évoque|évoquent|mentionne|mentionnent|parle|parlent|s'enquiert|s'informe|conteste|contestent|t'interroge|vous\s+interroge|te\s+demande|vous\s+demande|soulève|soulèvent|question)\w*\b",
    "de": r"\b(?:fragt|fragen|fragst|nachfragt|nachfragen|erkundigt|anspricht|ansprechen|erwähnt|erwähnen|hinterfragt|infrage\s+stellt|wissen\s+will|wissen\s+möchte|gefragt)\b|frage\b",
    "es": r"\b(?:pregunta|preguntan|preguntara|preguntase|pregunte|pregunten|consulta|consulte|consulten|menciona|mencione|mencionen|cuestiona|cuestione|cuestionen|saca\s+el\s+tema|se\s+interesa|interroga|te\s+pregunta|te\s+pregunten|le\s+pregunten|plantea|plantee|planteen|cuestión)\b",
    "pt": r"\b(?:pergunta|perguntar|perguntarem|perguntam|pergunte|perguntem|questiona|questionar|questionarem|menciona|mencionar|mencionarem|consulta|consultar|quiser\s+saber|quer\s+saber|te\s+perguntar|lhe\s+perguntar|levantar|levanta|questão)\b",
    "ru": r"(?:спросит|спросят|спрашивает|упоминает|упомянут|упоминают|спрашивают|спросил|спросили|интересуется|поинтересуется|упомянет|упоминает|заговорит|усомнится|задаст\s+вопрос|задаёт\s+вопрос|задает\s+вопрос|вопрос)",
}
#: The passive consequence: the asker "is to be told / should hear / must be answered".
_TOLD: Final = {
    "en": r"\b(?:is|are)\s+to\s+be\s+(?:told|answered|informed)|\b(?:should|must|shall|will)\s+be\s+(?:told|answered|informed)|\b(?:should|must)\s+hear\b|\bgets?\s+told\b",
    "fr": r"\b(?:doit|doivent|devra|devront|devrait|devraient)\s+(?:s'entendre\s+dire|entendre|être\s+informée?s?|recevoir\s+(?:comme\s+)?réponse|se\s+voir\s+répondre)|\bon\s+(?:doit\s+)?(?:répond|dit)\b",
    "de": r"\b(?:soll|sollen|muss|müssen|sollte|sollten)\s+(?:\w+\s+){0,3}?(?:hören|erfahren|gesagt\s+bekommen|gesagt\s+werden|mitgeteilt\s+werden|informiert\s+werden|zur\s+antwort\s+bekommen)\b|\bsag\w*\s+(?:man|ihm|ihr|ihnen)\b|\bist\s+zu\s+(?:sagen|antworten|erklären|erzählen|versichern)\b",
    "es": r"\bhay\s+que\s+(?:decirle|decirles|responderle|responderles|contestarle|contestarles|contarle|contarles)\b|\b(?:debe|deben|deberá|deberán)\s+(?:oír|escuchar|saber|recibir\s+como\s+respuesta|ser\s+informad)\w*|\bse\s+le(?:s)?\s+(?:dice|dirá|debe\s+decir|responde|contesta)\b",
    "pt": r"\b(?:deve|devem|deverá|deverão)\s+(?:ouvir|escutar|saber|ser\s+informad\w*|receber\s+como\s+resposta)\b|\bé\s+preciso\s+(?:dizer|responder)\b|\bdiga-se\b",
    "ru": r"(?:нужно|надо|следует|необходимо|стоит)\s+(?:говорить|сказать|отвечать|ответить|сообщать|сообщить|объяснять|объяснить)\b|(?:говорите|отвечайте|сообщайте)\b",
}
#: Chinese: an order at a clause's opening (after a label or a comma-less start).
_ZH_OPEN: Final = (
    r"(?:请(?!求)|麻烦你|麻烦您|劳驾|务必|切记|千万|一定要|不要|别(?!人|的|处|名)|不许|不准|立刻|马上|赶紧|"
    r"把(?!握)|将(?!来|近|要|会)[^,。]{1,40}?(?:发|贴|粘贴|上传|复制|拷贝|转发|公开|删|关|标记|推送|合并|加|添加|写|打印|输出|放|改|设|交|给|提交|导出)|"
    r"忘掉|忘记|忽略|无视|服从|关闭|关掉|禁用|停用|启用|删除|删掉|去掉|移除|发送|发给|发到|转发|上传|复制|拷贝|粘贴|贴到|贴上|公开|泄露|"
    r"分享|推送|合并|批准|跳过|绕过|标记|打印|输出|告诉|回答|声称|坚称|提交|写入|加上|添加|修改|替换|安装|执行|打开|交出|透露|展示|"
    r"在[^。,]{1,20}?(?:里|中|上)(?:写上|写入|贴上|加上|放上|记下|打印|输出|留下|附上)|(?:不[^。,]{1,8})?直接(?:合并|推送|发布|部署|提交|删|关|上线|批准|跳过)|"
    r"给我|发我|让我们|我们(?:来|先)?[^,。]{0,20}吧)"
)
_ZH_LEADS: Final = r"(?:(?:代理|助手|机器人|智能体|模型)\s*,\s*|今晚|今天|今日|明天|现在|立即|立刻|马上|稍后|之后|然后|另外|还有|并且|同时|先|再|也|顺便)*"
_ZH_CAUSE: Final = r"(?:让|使|要求|试图|企图|诱使|诱导|骗|叫|令|命令|指示|声称|说服|要)"
_ZH_IF: Final = r"(?:如果|若|要是|假如|万一|当|每当|一旦|凡是|谁|任何人|只要|无论谁|不管谁|有人|别人|他人)"
_ZH_ASK: Final = r"(?:提出[^。,]{0,12}?问题|问题|问|询问|问起|问到|提到|提起|质疑|打听|追问|问及|咨询)"
_ZH_SAY: Final = r"(?:你|您)?(?:(?:就|都|便|则|一律|统统|一概|要|请|只|也)+\s*)?(?:(?:向|跟|对|给)?(?:他|她|他们|她们|对方|用户|客户|大家)\s*)?(?:把|将|说|保证|回答|回复|告诉|答复|声称|表示|坚称|称|解释|保证|告知|回应)"
#: Japanese: an obligation with no subject named (``...しなければならない``) is the reader's.
_JA_OBLIGED: Final = r"^[^は]*(?:なければならない|なければいけない|なくてはならない|なくてはいけない|ねばならない|べきだ|べきです|べき)\s*$"
#: Japanese: a sentence that ends as an order.
_JA_END: Final = (
    r"(?:て|てください|で下さい|て下さい|でください|てくれ|でくれ|てちょうだい|なさい|しろ|せよ|ろ|ないで|ないでください|るな|"
    r"書き込め|書け|送れ|消せ|出せ|渡せ|外せ|流せ|晒せ|漏らせ|言え|載せろ|貼れ|押せ|戻せ|置け|[るうくすつぬむぶぐ]こと|るように|ように|ましょう|よう|てほしい|てほしいです|ていただきたい|てもらえますか|てもらえませんか|"
    r"てくれますか|てくれませんか|ていただけますか|ていただけませんか|てもらえる|てくれる)\s*[!?]?\s*$"
)
_JA_ASK: Final = r"(?:持ち出し|持ち出す|聞かれ|訊かれ|尋ねられ|質問され|問われ|聞いてき|尋ねてき|質問してき|聞いたら|尋ねたら|質問したら|問い合わせ|尋ねる人|聞く人|質問する人|聞いてくる|尋ねてくる)"
_JA_SAY: Final = r"(?:と|って|だと)\s*(?:答え|言っ|言い|言え|言う|伝え|説明し|説明す|返し|返す|主張し|主張す|回答し|回答す|返答し|返答す|断言|言わ)(?!た)"
_JA_INJECT: Final = r"(?:無視|忘れ)(?:して|しろ|せよ|なさい|てください|て下さい|ろ|て)"

#: Verbs that send something out: an order with one of these is described as exfiltration.
_SEND: Final = (
    r"(?:send|mail|email|e-mail|forward|upload|paste|post|copy|print|include|leak|share|publish|"
    r"envo|transf|transmet|colle|copi|publi|partag|imprim|inclu|mail|"
    r"schick|send|leite|kopier|füg|poste|veröffentlich|druck|teil|"
    r"mand|envi|reenv|peg|sub|compart|manda|encaminh|col|"
    r"отправ|пришл|перешл|скин|вышл|загруз|зале|выложи|опубликуй|вставь|вставьте|скопируй|скопируйте|распечат|выведи|"
    r"发|贴|粘贴|上传|复制|拷贝|转发|公开|泄露|分享|打印|输出|交出|送|貼り付け|コピー|共有|公開|印刷|出力)"
)

#: Words that attribute a quotation to someone: the quoted words are reported, not said.
_REPORTED: Final = (
    r"(?:said|says|wrote|writes|read|reads|asked|asks|claimed|subject|titled|phishing|fake|scam|fraud|"
    r"disait|dit|écrit|écrivait|demandait|intitulé|objet|hameçonnage|faux|fausse|frauduleu|"
    r"schrieb|sagte|hieß|lautete|betreff|gefälscht|falsch|"
    r"decía|dijo|escribió|pedía|titulado|asunto|falso|fraudulent|"
    r"dizia|disse|escreveu|pedia|assunto|"
    r"гласил|писал|написал|говорил|сказал|просил|тема|фишинг|фальшив|поддельн|мошенн|"
    r"写着|写道|说|称|声称|标题|主题|钓鱼|假冒|伪造|诈骗|"
    r"書かれ|書いて|言って|件名|フィッシング|偽の|詐欺|求め)"
)
_QUOTES: Final = r"«[^»]{1,400}»|\"[^\"]{1,400}\"|„[^\"“]{1,400}[\"“]|「[^」]{1,400}」|『[^』]{1,400}』"
_BACKQUOTED: Final = r"`[^`\n]{1,300}`"
_SENTENCE: Final = r"[^.!?;\n。]+"
#: What opens a part of a sentence: its start, after a colon or a dash, after a bracketed label.
_PARTS: Final = r"\s*(?::|\s[-–—]+\s|^\s*[\[(【<{][^\])】>}]{0,40}[\])】>}])\s*"
#: Lead words a sentence may open with before its verb ("Also, ...", "Bitte ...", "Пожалуйста, ...").
_LEADS: Final = (
    r"(?:(?:also|and|then|please|kindly|now|so|aussi|et|puis|alors|maintenant|donc|s'il\s+te\s+plaît|s'il\s+vous\s+plaît|stp|svp|"
    r"bitte|und|dann|jetzt|also|auch|außerdem|por\s+favor|y|luego|ahora|también|además|e|então|agora|também|além\s+disso|"
    r"пожалуйста|и|а|теперь|также|ещё|еще|потом|затем|срочно|просто|agent|agente|агент|assistant|assistente|asistente|ассистент|bot|бот|model|модель|claude|codex|тихо|тихонько|быстро|незаметно|сразу|обязательно|молча)[\s,]+)*"
)


#: Imperative endings no other form of a word has, at a sentence's opening: French ``-ez``
#: (not ``rendez-vous``, ``chez``, ``assez``), Russian ``-йте/-ите/-ьте``.
_GENERIC_IMPERATIVE: Final = {
    "fr": r"(?!chez\b|assez\b|nez\b)\w{3,}ez\b(?!-(?:vous|tu))",
    "ru": r"\w{3,}(?:йте|ите|ьте)\b",
}

#: German puts its verb second: after "dann", "jetzt", "also" a verb and "sie" is a statement.
_GERMAN_LEADS: Final = r"(?:(?:bitte|und)[\s,]+)*"


#: Function words that say which Latin-script language a text is in.  Word rules of a language
#: apply only to texts with at least as many of its function words as of English ones: "Use of
#: the client" is English, not a Spanish order ("Use el cliente").
_FUNCTION_WORDS: Final = {
    "en": "the of to and is are was were in for with on that this it be by from at as an or not no you your",
    "fr": "le la les des du de un une et est sont pour que qui dans sur avec pas ne au aux ce cette ces tu vous ton ta tes votre vos il elle on",
    "de": "der die das den dem des ein eine einen und ist sind nicht mit für auf zu im in von dass du sie ihr dein deine wenn wer bitte",
    "es": "el la los las de del un una y es son que en por para con no al se lo tu tus su sus usted este esta",
    "pt": "o a os as de do da dos das um uma e é são que em no na para com não ao se você seu sua teu tua",
}


class _Lang(NamedTuple):
    code: str
    injection: tuple[re.Pattern[str], ...]
    opener: re.Pattern[str] | None
    polite: re.Pattern[str] | None
    you_must: re.Pattern[str] | None
    recast: re.Pattern[str] | None
    conditional: re.Pattern[str] | None
    told: re.Pattern[str] | None


def _fold(pattern: str) -> re.Pattern[str]:
    """``pattern`` compiled in the space :func:`judge` maps text into (so its words match judged text)."""
    return re.compile(judge(pattern.lower()).text)


@lru_cache(maxsize=1)
def _languages() -> tuple[_Lang, ...]:
    out = []
    for code in _LANG_NAMES:
        nouns = _alt(_RULES_NOUNS[code])
        injection: list[str] = []
        if _DROP.get(code):
            injection.append(rf"(?:^|[,:]\s*|\s(?:-|—)+\s*)(?:{_LEADS}){_alt(_DROP[code])}\b[^.!?;\n]{{0,60}}?{'' if code == 'de' else chr(92) + 'b'}{nouns}\b")
            injection.append(rf"\b{_alt(_OWNER[code])}\b[^.!?;\n]{{0,60}}?\b{nouns}\b[^.!?;\n]{{0,80}}?{_VOID[code]}")
        elif code == "zh":
            injection.append(rf"^(?:(?!{_ZH_CAUSE}).)*?(?:忘掉|忘记|忽略|忽视|无视|不要理会|别管|抛开|推翻|放弃)[^。,]{{0,30}}?{nouns}")
            injection.append(rf"{nouns}[^。]{{0,20}}?(?:已经|已|都|全部|均|一律)?{_VOID[code]}")
        elif code == "ja":
            injection.append(rf"{nouns}[^。]{{0,30}}?{_JA_INJECT}")
            injection.append(rf"{nouns}[^。]{{0,20}}?{_VOID[code]}(?:です|だ|になった|となった|とする|にする|になります)")
        if code in _RELEASED:
            injection.append(_RELEASED[code].replace("{nouns}", nouns))
        imperatives = _IMPERATIVES.get(code, "")
        opener = None
        if imperatives:
            imp = _alt(imperatives)
            neg = _NEGATIONS.get(code, "").replace("{imp}", imp)
            clitics = r"(?:-?(?:me|te|lo|la|los|las|le|les|nos|selo|sela|melo|mela|moi|lui|leur|les|la|le|lhe|lhes|mir|ihm|uns)|-(?:a|o|as|os))?"
            generic = _GENERIC_IMPERATIVE.get(code)
            if code == "en":
                imp = rf"{imp}\s+(?:\w+\s+)?{_alt(_EN_OBJECTS)}"
                clitics = ""
            opener = (
                rf"^{_LEADS}(?:{imp}{clitics}\b(?!-(?:tu|vous|il|elle|on|nous|ils))"
                + (rf"|{neg}" if neg else "")
                + (rf"|{generic}" if generic else "")
                + ")"
            )
        elif code == "zh":
            opener = rf"^{_ZH_LEADS}{_ZH_OPEN}"
        elif code == "ja":
            opener = _JA_END
        conditional = None
        if code in _ASK:
            conditional = rf"{_IF[code]}[^.!?;\n]{{0,160}}?{_ASK[code]}"
        elif code == "zh":
            conditional = rf"{_ZH_IF}[^。]{{0,60}}?{_ZH_ASK}[^。]{{0,80}}?[,，]\s*{_ZH_SAY}|{_ZH_IF}[^。]{{0,60}}?{_ZH_ASK}[^。,]{{0,60}}?(?:就|都|便|一律|统统)\s*{_ZH_SAY}"
        elif code == "ja":
            conditional = rf"{_JA_ASK}[^。]{{0,80}}?{_JA_SAY}"
        out.append(
            _Lang(
                code,
                tuple(_fold(p) for p in injection),
                _fold(opener) if opener else None,
                _fold(rf"^{_GERMAN_LEADS if code == 'de' else _LEADS}(?:{_POLITE[code]})") if code in _POLITE else None,
                _fold(_YOU_MUST[code] + (f"|{_JA_OBLIGED}" if code == "ja" else "")) if code in _YOU_MUST else None,
                _fold(_RECAST[code]) if code in _RECAST else None,
                _fold(conditional) if conditional else None,
                _fold(_TOLD[code] + (f"|{_YOU_SAY[code]}" if code in _YOU_SAY else "")) if code in _TOLD else None,
            )
        )
    return tuple(out)


@lru_cache(maxsize=1)
def _shared() -> tuple[re.Pattern[str], ...]:
    return (_fold(_SEND), _fold(_REPORTED), re.compile(_QUOTES), re.compile(_BACKQUOTED), re.compile(_SENTENCE), re.compile(_PARTS))


_QUOTE_MARKS: Final = frozenset("«»\"„“「」『』")


def _unquote(text: str, quotes: re.Pattern[str], reported: re.Pattern[str]) -> str:
    """``text`` with quotations attributed to someone blanked; a bare quotation is judged as if unquoted."""
    if not _QUOTE_MARKS.intersection(text):  # most claims: nothing to blank, and the reported-speech search is skipped
        return text
    outside = quotes.sub(" ", text)
    if reported.search(outside) and re.search(r"\w{2,}", outside):
        return quotes.sub(" … ", text)
    return re.sub(r"[«»\"„“「」『』]", " ", text)


def _unreport(sentence: str, reported: re.Pattern[str]) -> str:
    """``sentence`` up to the colon after a reporting word ("the attacker wrote: ..."): what follows is reported."""
    colon = sentence.find(":")
    return sentence[:colon] if colon > 0 and reported.search(sentence[:colon]) else sentence


_EDGES: Final = " \t,\"'*_>-•()¿¡…"


def _parts(sentence: str, parts: re.Pattern[str]) -> list[str]:
    """The openings of a sentence: its start and what follows each label, colon or dash in it."""
    pieces = (re.sub(r"^[^\w¿¡]+", "", p).strip(_EDGES) for p in parts.split(sentence) if p)
    return [p for p in pieces if p]


def _name(code: str, kind: str, what: str) -> Finding:
    rule = "injection" if kind == "injection" else "directive"
    return Finding(rule, f"{code}.{kind}", f"{what} ({_LANG_NAMES[code]}, rule {code}.{kind})")


@lru_cache(maxsize=1)
def _function_words() -> dict[str, tuple[str, ...]]:
    """Each function word (folded) and the languages it belongs to."""
    owners: dict[str, list[str]] = {}
    for code, words in _FUNCTION_WORDS.items():
        for word in judge(words).text.split():
            owners.setdefault(word, []).append(code)
    return {word: tuple(codes) for word, codes in owners.items()}


_LATIN_WORD: Final = re.compile(r"[a-z']+")
_CYRILLIC: Final = re.compile("[\u0400-\u04ff]")
_HAN: Final = re.compile("[\u3400-\u9fff\uf900-\ufaff\u3000-\u303f\uff00-\uffef]")
_KANA: Final = re.compile("[\u3040-\u30ff\u31f0-\u31ff]")


def _present(text: str, judged: str, langs: tuple[_Lang, ...]) -> tuple[_Lang, ...]:
    """The languages whose rules apply: Russian, Chinese, Japanese by their scripts in ``text`` (as
    written: judging folds Cyrillic look-alikes to Latin); the Latin-script ones by function words."""
    owners = _function_words()
    counts = dict.fromkeys(_FUNCTION_WORDS, 0)
    for word in _LATIN_WORD.findall(judged):
        for code in owners.get(word, ()):
            counts[code] += 1
    floor = max(1, counts["en"])
    present = {code for code, n in counts.items() if n >= floor} | ({"en"} if counts["en"] or not any(counts.values()) else set())
    if _CYRILLIC.search(text):
        present.add("ru")
    if _HAN.search(text) or _KANA.search(text):
        present |= {"zh", "ja"}
    return tuple(lang for lang in langs if lang.code in present)


def check(text: str, *, injection_only: bool = False) -> Finding | None:
    """The first multilingual rule ``text`` breaks (an order to the reader, or an injection), or None.

    With ``injection_only`` (evidence and reasons, which may quote orders), only the injection rules.
    """
    send, reported, quotes, backquoted, sentence_re, parts_re = _shared()
    # ASCII text is its own judgement (nothing to normalise or fold); the rest is judged lower-cased,
    # as the word lists were (an upper-case Cyrillic letter folds unlike its lower-case twin).
    judged = text.lower() if text.isascii() else judge(text.lower()).text
    judged = _unquote(backquoted.sub(" `cmd` ", judged), quotes, reported)
    sentences = [s.strip() for s in sentence_re.findall(judged) if s.strip()]
    langs = _present(text, judged, _languages())
    for lang in langs:
        for pattern in lang.injection:
            if any(pattern.search(s) for s in sentences):
                return _name(lang.code, "injection", "an instruction to drop the rules the reader was given")
    if injection_only:
        return None
    for sentence in sentences:
        openings = _parts(_unreport(sentence, reported), parts_re)
        for lang in langs:
            if lang.conditional is not None and (match := lang.conditional.search(sentence)):
                after = sentence[match.end():]
                told = lang.told is not None and lang.told.search(after)
                pieces = [p.strip(" ,") for p in re.split(r",|\s(?:alors|dann|so|entonces|então|то)\s", after)[1:]]
                ordered = lang.opener is not None and any(lang.opener.search(p) for p in pieces if p)
                if lang.code in ("zh", "ja") or told or ordered:
                    return _name(lang.code, "conditional", "a conditional instruction to the reader (when asked ..., answer ...)")
            if lang.recast is not None and lang.recast.search(sentence):
                return _name(lang.code, "you_must", "the reader given a new role or task")
            if lang.you_must is not None and lang.you_must.search(sentence):
                return _name(lang.code, "you_must", "an instruction addressed to the reader")
            for opening in openings:
                if lang.polite is not None and lang.polite.search(opening):
                    return _name(lang.code, "you_must", "a request or a formal imperative addressed to the reader")
                if lang.opener is not None and lang.opener.search(opening):
                    if send.search(opening[:40]) or (lang.code == "ja" and send.search(opening)):
                        return _name(lang.code, "imperative", "an exfiltration request: an order to send something out")
                    return _name(lang.code, "imperative", "a sentence that is an order to the reader")
    return None
