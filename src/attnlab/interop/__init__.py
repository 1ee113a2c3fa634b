"""attnlab models to and from other toolkits: the CTranslate2 export (`ctranslate2`)."""
