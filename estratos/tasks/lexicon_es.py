"""A small Spanish lexicon for the synthetic probing suite (``synthetic-es``).

Written for this project so that every generated sentence is grammatical by construction:
nouns carry their gender and both number forms, adjectives their four agreement forms, and
verbs their 3rd-person present / preterite / future forms. Regular verbs are conjugated by
rule; every irregularity (spelling changes, stem changes, irregular stems) is spelled out in
the verb's entry, so there is no guessing at generation time.

Pools are split by role on purpose: animate nouns are subjects (and objects of verbs that take
the personal *a*), inanimate nouns are objects, place nouns appear only in prepositional
phrases, and the WordContent targets appear nowhere else, so a WordContent label is exactly
the one target word present in its sentence.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Dict, Mapping, Tuple

TENSES: Tuple[str, ...] = ("PAST", "PRES", "FUT")
NUMBERS: Tuple[str, ...] = ("sg", "pl")


@dataclass(frozen=True)
class Noun:
    """A noun with its grammatical gender and both number forms (plurals are listed, not
    derived)."""

    sg: str
    pl: str
    gender: str

    def form(self, number: str) -> str:
        return self.sg if number == "sg" else self.pl


@dataclass(frozen=True)
class Adjective:
    """An adjective's four agreement forms; invariable-in-gender ones repeat a form."""

    m_sg: str
    f_sg: str
    m_pl: str
    f_pl: str

    def form(self, gender: str, number: str) -> str:
        return {("m", "sg"): self.m_sg, ("f", "sg"): self.f_sg,
                ("m", "pl"): self.m_pl, ("f", "pl"): self.f_pl}[(gender, number)]


@dataclass(frozen=True)
class Verb:
    """A transitive verb; ``irregular`` maps ``(tense, number)`` to forms that break the rule."""

    infinitive: str
    irregular: Mapping[Tuple[str, str], str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.infinitive[-2:] not in ("ar", "er", "ir"):
            raise ValueError(f"not an infinitive: {self.infinitive!r}")
        object.__setattr__(self, "irregular", MappingProxyType(dict(self.irregular)))

    def form(self, tense: str, number: str) -> str:
        """3rd-person form for ``tense`` in PAST/PRES/FUT (preterite, present, future)."""
        if (tense, number) in self.irregular:
            return self.irregular[(tense, number)]
        return conjugate_regular(self.infinitive, tense, number)


#: regular 3rd-person endings by verb class: (tense, number) -> ending added to the stem
_ENDINGS: Mapping[str, Mapping[Tuple[str, str], str]] = MappingProxyType({
    "ar": {("PRES", "sg"): "a", ("PRES", "pl"): "an",
           ("PAST", "sg"): "ó", ("PAST", "pl"): "aron"},
    "er": {("PRES", "sg"): "e", ("PRES", "pl"): "en",
           ("PAST", "sg"): "ió", ("PAST", "pl"): "ieron"},
    "ir": {("PRES", "sg"): "e", ("PRES", "pl"): "en",
           ("PAST", "sg"): "ió", ("PAST", "pl"): "ieron"},
})


def conjugate_regular(infinitive: str, tense: str, number: str) -> str:
    """The regular 3rd-person form; the future is built on the whole infinitive."""
    if tense not in TENSES or number not in NUMBERS:
        raise ValueError(f"unknown tense/number {tense!r}/{number!r}")
    if tense == "FUT":
        return infinitive + ("á" if number == "sg" else "án")
    return infinitive[:-2] + _ENDINGS[infinitive[-2:]][(tense, number)]


def _irr(**forms: str) -> Dict[Tuple[str, str], str]:
    """``_irr(PRES_sg="tiene")`` -> ``{("PRES", "sg"): "tiene"}`` (keeps entries readable)."""
    out: Dict[Tuple[str, str], str] = {}
    for key, value in forms.items():
        tense, number = key.split("_")
        out[(tense, number)] = value
    return out


DETERMINERS: Mapping[str, Mapping[Tuple[str, str], str]] = MappingProxyType({
    "def": {("m", "sg"): "el", ("f", "sg"): "la", ("m", "pl"): "los", ("f", "pl"): "las"},
    "indef": {("m", "sg"): "un", ("f", "sg"): "una", ("m", "pl"): "unos", ("f", "pl"): "unas"},
    "dem": {("m", "sg"): "este", ("f", "sg"): "esta", ("m", "pl"): "estos", ("f", "pl"): "estas"},
    "dem2": {("m", "sg"): "ese", ("f", "sg"): "esa", ("m", "pl"): "esos", ("f", "pl"): "esas"},
})

#: possessive determiners, the same for both genders: the WordContent target takes one, so
#: no article says which gender (and so which half of the labels) the target belongs to
POSSESSIVES: Mapping[str, str] = MappingProxyType({"sg": "su", "pl": "sus"})

#: object clitics (lo/la/los/las) that resume an object in a coordinated clause
CLITICS: Mapping[Tuple[str, str], str] = MappingProxyType(
    {("m", "sg"): "lo", ("f", "sg"): "la", ("m", "pl"): "los", ("f", "pl"): "las"})

#: people and animals: subjects, and objects of the personal-*a* verbs
ANIMATE: Tuple[Noun, ...] = (
    Noun("niño", "niños", "m"), Noun("niña", "niñas", "f"),
    Noun("profesor", "profesores", "m"), Noun("profesora", "profesoras", "f"),
    Noun("médico", "médicos", "m"), Noun("médica", "médicas", "f"),
    Noun("vecino", "vecinos", "m"), Noun("vecina", "vecinas", "f"),
    Noun("alumno", "alumnos", "m"), Noun("alumna", "alumnas", "f"),
    Noun("hermano", "hermanos", "m"), Noun("hermana", "hermanas", "f"),
    Noun("abuelo", "abuelos", "m"), Noun("abuela", "abuelas", "f"),
    Noun("cocinero", "cocineros", "m"), Noun("cocinera", "cocineras", "f"),
    Noun("pintor", "pintores", "m"), Noun("pintora", "pintoras", "f"),
    Noun("escritor", "escritores", "m"), Noun("escritora", "escritoras", "f"),
    Noun("actor", "actores", "m"), Noun("actriz", "actrices", "f"),
    Noun("campesino", "campesinos", "m"), Noun("enfermera", "enfermeras", "f"),
    Noun("ingeniero", "ingenieros", "m"), Noun("bailarina", "bailarinas", "f"),
    Noun("bailarín", "bailarines", "m"), Noun("panadero", "panaderos", "m"),
    Noun("cartero", "carteros", "m"), Noun("periodista", "periodistas", "f"),
    Noun("perro", "perros", "m"), Noun("gata", "gatas", "f"),
)

#: things: objects of the transitive verbs
INANIMATE: Tuple[Noun, ...] = (
    Noun("libro", "libros", "m"), Noun("carta", "cartas", "f"), Noun("caja", "cajas", "f"),
    Noun("lápiz", "lápices", "m"), Noun("flor", "flores", "f"), Noun("silla", "sillas", "f"),
    Noun("coche", "coches", "m"), Noun("bicicleta", "bicicletas", "f"),
    Noun("maleta", "maletas", "f"), Noun("llave", "llaves", "f"),
    Noun("cuaderno", "cuadernos", "m"), Noun("sombrero", "sombreros", "m"),
    Noun("camisa", "camisas", "f"), Noun("reloj", "relojes", "m"),
    Noun("pelota", "pelotas", "f"), Noun("regalo", "regalos", "m"),
    Noun("mapa", "mapas", "m"), Noun("cuadro", "cuadros", "m"),
    Noun("botella", "botellas", "f"), Noun("lámpara", "lámparas", "f"),
    Noun("teléfono", "teléfonos", "m"), Noun("vaso", "vasos", "m"),
    Noun("foto", "fotos", "f"), Noun("mochila", "mochilas", "f"),
    Noun("zapato", "zapatos", "m"), Noun("cuchara", "cucharas", "f"),
)

#: places: only inside prepositional phrases
PLACES: Tuple[Noun, ...] = (
    Noun("parque", "parques", "m"), Noun("plaza", "plazas", "f"),
    Noun("mercado", "mercados", "m"), Noun("escuela", "escuelas", "f"),
    Noun("jardín", "jardines", "m"), Noun("biblioteca", "bibliotecas", "f"),
    Noun("cocina", "cocinas", "f"), Noun("calle", "calles", "f"),
    Noun("pueblo", "pueblos", "m"), Noun("playa", "playas", "f"),
    Noun("oficina", "oficinas", "f"), Noun("estación", "estaciones", "f"),
    Noun("museo", "museos", "m"), Noun("tienda", "tiendas", "f"),
)

#: WordContent targets: things used by no other pool, so each label word is unambiguous
WORD_CONTENT: Tuple[Noun, ...] = (
    Noun("anillo", "anillos", "m"), Noun("cesta", "cestas", "f"),
    Noun("espejo", "espejos", "m"), Noun("guitarra", "guitarras", "f"),
    Noun("martillo", "martillos", "m"), Noun("manta", "mantas", "f"),
    Noun("periódico", "periódicos", "m"), Noun("tijera", "tijeras", "f"),
    Noun("violín", "violines", "m"), Noun("vela", "velas", "f"),
    Noun("pastel", "pasteles", "m"), Noun("almohada", "almohadas", "f"),
    Noun("cuchillo", "cuchillos", "m"), Noun("corbata", "corbatas", "f"),
    Noun("paraguas", "paraguas", "m"), Noun("escoba", "escobas", "f"),
)

ADJECTIVES: Tuple[Adjective, ...] = (
    Adjective("rojo", "roja", "rojos", "rojas"),
    Adjective("pequeño", "pequeña", "pequeños", "pequeñas"),
    Adjective("nuevo", "nueva", "nuevos", "nuevas"),
    Adjective("viejo", "vieja", "viejos", "viejas"),
    Adjective("blanco", "blanca", "blancos", "blancas"),
    Adjective("bonito", "bonita", "bonitos", "bonitas"),
    Adjective("grande", "grande", "grandes", "grandes"),
    Adjective("azul", "azul", "azules", "azules"),
    Adjective("verde", "verde", "verdes", "verdes"),
    Adjective("negro", "negra", "negros", "negras"),
    Adjective("antiguo", "antigua", "antiguos", "antiguas"),
)

#: adjectives that suit people and animals
ANIMATE_ADJECTIVES: Tuple[Adjective, ...] = (
    Adjective("alto", "alta", "altos", "altas"),
    Adjective("simpático", "simpática", "simpáticos", "simpáticas"),
    Adjective("cansado", "cansada", "cansados", "cansadas"),
    Adjective("feliz", "feliz", "felices", "felices"),
    Adjective("amable", "amable", "amables", "amables"),
    Adjective("joven", "joven", "jóvenes", "jóvenes"),
    Adjective("tranquilo", "tranquila", "tranquilos", "tranquilas"),
    Adjective("contento", "contenta", "contentos", "contentas"),
)

#: verbs that take a thing as direct object
THING_VERBS: Tuple[Verb, ...] = (
    Verb("comprar"), Verb("mirar"), Verb("buscar"), Verb("llevar"), Verb("vender"),
    Verb("limpiar"), Verb("pintar"), Verb("romper"), Verb("guardar"), Verb("describir"),
    Verb("recibir"), Verb("dibujar"), Verb("esconder"), Verb("olvidar"), Verb("regalar"),
    Verb("usar"), Verb("cuidar"), Verb("preparar"),
    Verb("mover", _irr(PRES_sg="mueve", PRES_pl="mueven")),
    Verb("tener", _irr(PRES_sg="tiene", PRES_pl="tienen", PAST_sg="tuvo",
                       PAST_pl="tuvieron", FUT_sg="tendrá", FUT_pl="tendrán")),
    Verb("traer", _irr(PAST_sg="trajo", PAST_pl="trajeron")),
    Verb("perder", _irr(PRES_sg="pierde", PRES_pl="pierden")),
    Verb("encontrar", _irr(PRES_sg="encuentra", PRES_pl="encuentran")),
    Verb("pedir", _irr(PRES_sg="pide", PRES_pl="piden", PAST_sg="pidió",
                       PAST_pl="pidieron")),
    Verb("elegir", _irr(PRES_sg="elige", PRES_pl="eligen", PAST_sg="eligió",
                        PAST_pl="eligieron")),
    Verb("hacer", _irr(PAST_sg="hizo", PAST_pl="hicieron", FUT_sg="hará",
                       FUT_pl="harán")),
    Verb("poner", _irr(PAST_sg="puso", PAST_pl="pusieron", FUT_sg="pondrá",
                       FUT_pl="pondrán")),
)

#: verbs that take a person or animal with the personal *a* (a + el -> al)
PERSON_VERBS: Tuple[Verb, ...] = (
    Verb("ayudar"), Verb("saludar"), Verb("llamar"), Verb("visitar"), Verb("escuchar"),
    Verb("invitar"), Verb("esperar"), Verb("abrazar"), Verb("acompañar"), Verb("observar"),
    Verb("conocer", _irr(PRES_sg="conoce", PRES_pl="conocen")),
    Verb("seguir", _irr(PRES_sg="sigue", PRES_pl="siguen", PAST_sg="siguió",
                        PAST_pl="siguieron")),
    Verb("despertar", _irr(PRES_sg="despierta", PRES_pl="despiertan")),
)

#: prepositions of the place phrases; contracting ones merge with "el" (de el -> del)
PREPOSITIONS: Tuple[str, ...] = ("en", "cerca de", "junto a", "delante de", "detrás de")
CONTRACTIONS: Mapping[Tuple[str, str], str] = MappingProxyType({("de", "el"): "del",
                                                                 ("a", "el"): "al"})
#: sentence openers that suit any tense (a fronted adverb before the subject)
OPENING_ADVERBS: Tuple[str, ...] = ("por fin", "sin duda", "seguramente", "por suerte",
                                    "quizás")
#: conjunctions that open the subordinate clause of SubjNumber and ObjNumber; both take
#: the indicative in every tense, and only ``aunque`` opens a fronted clause
SUBORDINATORS: Tuple[str, ...] = ("porque", "aunque")
FRONTED_SUBORDINATOR = "aunque"
#: coordinators of CoordinationInversion (clause order matters: the 2nd clause resumes the 1st)
COORDINATORS: Tuple[str, ...] = ("y", "y luego", "y después", "y más tarde")


def _noun_forms() -> Mapping[str, Tuple[Noun, str]]:
    forms: Dict[str, Tuple[Noun, str]] = {}
    for noun in ANIMATE + INANIMATE + PLACES:
        for number in NUMBERS:
            form = noun.form(number)
            if form in forms:
                raise ValueError(f"noun form {form!r} has two readings")
            forms[form] = (noun, number)
    return MappingProxyType(forms)


#: noun form -> (noun, number) for the pools clauses use (WORD_CONTENT has "paraguas", the
#: same in both numbers, and is left out): a generated sentence's nouns can be read back, so
#: OddManOut swaps two nouns only when their gender and number agree
NOUN_FORMS: Mapping[str, Tuple[Noun, str]] = _noun_forms()
#: the forms of the animate nouns (people and animals)
ANIMATE_FORMS = frozenset(n.form(num) for n in ANIMATE for num in NUMBERS)
